// The audit page: one relation at a time, verdicts sent straight to the server (which commits
// each one), so nothing lives only in the browser but how you signed in. With auditor tokens the
// token is kept in sessionStorage (this tab only) and sent as a bearer token on every /api call;
// the server takes your name from it. Without tokens (loopback only) you type your name, kept in
// localStorage. Pictures are fetched with the token and shown from blob: URLs, since an <img src>
// cannot carry an Authorization header.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const state = { tokens: false, token: sessionStorage.getItem("audit.token") || "", auditor: "",
                  item: null, busy: false, imageUrl: null };
  const KEYS = { t: "true", f: "false", u: "unsure" };

  const { setStatus, authHeaders, api } = RelatePage.bind(() => state.token);

  function showProgress(p) {
    $("progress-bar").max = Math.max(1, p.total);
    $("progress-bar").value = p.judged;
    $("progress-text").textContent = `${p.judged} / ${p.total} judged by ${p.auditor}`;
  }

  async function loadPicture(item) {
    const res = await fetch("/api/image?item_id=" + encodeURIComponent(item.item_id), { headers: authHeaders() });
    if (!res.ok) throw new Error(`picture of ${item.item_id}: HTTP ${res.status}`);
    const blob = await res.blob();
    if (state.item !== item) return;                // a newer item is already showing
    const img = $("scene");
    if (state.imageUrl) URL.revokeObjectURL(state.imageUrl);
    state.imageUrl = URL.createObjectURL(blob);
    img.dataset.pending = item.item_id;
    img.src = state.imageUrl;
  }

  function showItem(item) {
    state.item = item;
    const main = $("relation");
    if (!item) {
      main.hidden = true;
      main.dataset.itemId = "";
      $("done").hidden = false;
      return;
    }
    $("done").hidden = true;
    $("subject-name").textContent = item.subject.category || "subject";
    $("object-name").textContent = item.object.category || "object";
    $("predicate").textContent = item.predicate;
    $("item-tag").textContent = `item ${item.position + 1}: ${item.item_id}`;
    // Size the picture's box before the picture arrives, so nothing moves when it does; drop the
    // previous picture at once so a new claim is never seen next to the old scene.
    const img = $("scene");
    img.width = item.display.width;
    img.height = item.display.height;
    img.removeAttribute("src");
    img.dataset.itemId = "";
    main.dataset.itemId = item.item_id;
    main.hidden = false;
    loadPicture(item).catch((err) => setStatus(err.message, true));
  }

  function apply(data) {
    showProgress(data.progress);
    showItem(data.item);
  }

  async function run(what, fn) {
    if (state.busy || !state.auditor) return;
    state.busy = true;
    document.querySelectorAll("button.verdict, button.undo").forEach((b) => (b.disabled = true));
    try {
      await fn();
    } catch (err) {
      setStatus(`${what} failed: ${err.message}`, true);
    } finally {
      state.busy = false;
      document.querySelectorAll("button.verdict, button.undo").forEach((b) => (b.disabled = false));
    }
  }

  // With tokens the server knows who you are; without, the page names you.
  const whoField = () => (state.tokens ? {} : { auditor: state.auditor });

  function judge(verdict) {
    if (!state.item) return;
    const item = state.item;
    return run("saving", async () => {
      apply(await api("POST", "/api/verdict", { ...whoField(), item_id: item.item_id, verdict: verdict }));
      setStatus(`saved: ${item.item_id} is ${verdict}`);
    });
  }

  function undo() {
    return run("undo", async () => {
      const data = await api("POST", "/api/undo", whoField());
      apply(data);
      setStatus(data.undone ? `undone: ${data.undone}` : "nothing to undo");
    });
  }

  function begin(auditor) {
    state.auditor = auditor;
    const query = state.tokens ? "" : "?auditor=" + encodeURIComponent(auditor);
    return run("loading", async () => {
      apply(await api("GET", "/api/next" + query));
      setStatus(`auditing as ${auditor}: t = true, f = false, u = unsure, z or Backspace = undo`);
    });
  }

  function showSignIn(tokens) {
    state.tokens = tokens;
    const field = tokens ? "token" : "auditor";
    $(field).hidden = false;
    document.querySelector(`label[for="${field}"]`).hidden = false;
  }

  async function signInWithToken(token) {
    state.token = token;
    try {
      const who = await api("GET", "/api/whoami");
      sessionStorage.setItem("audit.token", token);
      return begin(who.auditor);
    } catch (err) {
      state.token = "";
      sessionStorage.removeItem("audit.token");
      setStatus(err.status === 401 ? "that token was refused: check it and try again" : err.message, true);
    }
  }

  $("who").addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (state.tokens) {
      const token = $("token").value.trim();
      $("token").value = "";
      $("token").blur();
      if (token) signInWithToken(token);
      return;
    }
    const name = $("auditor").value.trim();
    $("auditor").blur();
    if (!name) return;
    localStorage.setItem("audit.auditor", name);
    begin(name);
  });
  document.querySelectorAll("button.verdict").forEach((b) =>
    b.addEventListener("click", () => judge(b.dataset.verdict)));
  $("btn-undo").addEventListener("click", undo);
  $("btn-undo-done").addEventListener("click", undo);
  $("btn-report").addEventListener("click", () => run("report", async () => {
    $("report").textContent = JSON.stringify(await api("GET", "/api/report"), null, 2);
    $("report").hidden = false;
  }));
  $("scene").addEventListener("load", () => {
    $("scene").dataset.itemId = $("scene").dataset.pending || "";
  });

  document.addEventListener("keydown", (ev) => {
    const typing = ev.target instanceof HTMLInputElement || ev.target instanceof HTMLTextAreaElement;
    if (typing || ev.ctrlKey || ev.metaKey || ev.altKey || ev.repeat) return;
    const key = ev.key.toLowerCase();
    if (KEYS[key]) {
      ev.preventDefault();
      judge(KEYS[key]);
    } else if (key === "z" || ev.key === "Backspace") {
      ev.preventDefault();
      undo();
    }
  });

  // Ask the server how to sign in: a 401 means it wants a token.
  (async function init() {
    let who;
    try {
      who = await api("GET", "/api/whoami");
    } catch (err) {
      if (err.status !== 401) return setStatus(`cannot reach the audit server: ${err.message}`, true);
      showSignIn(true);
      const hadToken = !!state.token;
      state.token = "";
      sessionStorage.removeItem("audit.token");
      return setStatus(hadToken ? "your saved token was refused: enter your token" : "Enter your audit token and press Start.",
                       hadToken);
    }
    showSignIn(who.tokens);
    if (who.tokens) return begin(who.auditor);
    setStatus("Enter your name and press Start.");
    const saved = localStorage.getItem("audit.auditor");
    if (saved) {
      $("auditor").value = saved;
      begin(saved);
    }
  })();
})();
