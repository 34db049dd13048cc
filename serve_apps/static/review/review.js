// The review page: one proposed class pair at a time, answers sent straight to the server (which
// commits each one), so nothing lives only in the browser but how you signed in. Sign-in is the
// audit page's: with reviewer tokens the token is kept in sessionStorage (this tab only) and sent as
// a bearer token; without tokens (loopback only) you type your name, kept in localStorage. The
// Disagreements view lists the pairs decided differently, with the kappas, and settles them.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const state = { tokens: false, token: sessionStorage.getItem("review.token") || "", reviewer: "",
                  pair: null, busy: false, reasons: {}, view: "review" };
  const KEYS = { a: ["accept", null], 1: ["reject", "convention"], 2: ["reject", "broad_label"],
                 3: ["reject", "related_distractor"] };

  const { setStatus, authHeaders, api } = RelatePage.bind(() => state.token);

  function showProgress(p) {
    $("progress-bar").max = Math.max(1, p.total);
    $("progress-bar").value = p.reviewed;
    $("progress-text").textContent = `${p.reviewed} / ${p.total} reviewed by ${p.reviewer}`;
  }

  function showPair(pair) {
    state.pair = pair;
    const main = $("pair");
    main.dataset.pairId = pair ? pair.pair_id : "";
    main.hidden = !pair || state.view !== "review";
    $("done").hidden = !!pair || state.view !== "review";
    if (!pair) return;
    $("cell").textContent = pair.cell;
    $("question").textContent = pair.question;
    $("class-a").textContent = pair.class_a;
    $("class-b").textContent = pair.class_b;
    $("pair-tag").textContent = `pair ${pair.position + 1}: ${pair.pair_id}`;
  }

  function apply(data) {
    showProgress(data.progress);
    showPair(data.pair);
  }

  async function run(what, fn) {
    if (state.busy || !state.reviewer) return;
    state.busy = true;
    document.querySelectorAll("button").forEach((b) => (b.disabled = true));
    try {
      await fn();
    } catch (err) {
      setStatus(`${what} failed: ${err.message}`, true);
    } finally {
      state.busy = false;
      document.querySelectorAll("button").forEach((b) => (b.disabled = false));
    }
  }

  // With tokens the server knows who you are; without, the page names you.
  const whoField = () => (state.tokens ? {} : { reviewer: state.reviewer });
  const said = (d, r) => (d === "accept" ? "accept" : `reject (${r})`);

  function answer(decision, reason) {
    if (!state.pair || state.view !== "review") return;
    const pair = state.pair;
    return run("saving", async () => {
      apply(await api("POST", "/api/answer", { ...whoField(), pair_id: pair.pair_id, decision: decision,
                                                reason: reason }));
      setStatus(`saved: ${pair.pair_id} ${said(decision, reason)}`);
    });
  }

  function undo() {
    if (state.view !== "review") return;
    return run("undo", async () => {
      const data = await api("POST", "/api/undo", whoField());
      apply(data);
      setStatus(data.undone ? `undone: ${data.undone}` : "nothing to undo");
    });
  }

  function kappaText(g) {
    const k = (x) => (x === null ? "undefined" : x.toFixed(3));
    return `${g.reviewers[0]} vs ${g.reviewers[1]} on ${g.pairs} pairs: kappa accept/reject ` +
           `${k(g.decision.kappa)}, accept + reasons ${k(g.category.kappa)}`;
  }

  function showReport(rep) {
    $("kappa").textContent = rep.agreement.map(kappaText).join("; ") || "no pair answered by two reviewers yet";
    $("kappa").dataset.kappa = JSON.stringify(rep.agreement.map((g) => g.decision.kappa));
    const list = $("disagreements");
    list.replaceChildren();
    for (const d of rep.disagreements) {
      const li = document.createElement("li");
      li.dataset.pairId = d.pair_id;
      const who = Object.entries(d.answers).map(([r, a]) => `${r}: ${said(a.decision, a.reason)}`).join("; ");
      const head = document.createElement("p");
      head.textContent = `[${d.cell}] ${d.class_a} & ${d.class_b} (${d.pair_id}): ${who}`;
      const res = document.createElement("p");
      res.className = "resolution muted";
      res.textContent = d.resolution ? `resolved: ${said(d.resolution.decision, d.resolution.reason)} by ` +
                                       `${d.resolution.resolver}` : "open";
      li.append(head, res);
      for (const [key, [decision, reason]] of Object.entries(KEYS)) {
        const b = document.createElement("button");
        b.type = "button";
        b.className = "resolve " + decision;
        b.dataset.decision = decision;
        if (reason) b.dataset.reason = reason;
        b.textContent = said(decision, reason);
        if (reason) b.title = state.reasons[reason] || "";
        b.addEventListener("click", () => resolve(d.pair_id, decision, reason));
        li.append(b);
      }
      list.append(li);
    }
    $("resolve").dataset.open = String(rep.status.disagreement);
  }

  function resolve(pairId, decision, reason) {
    return run("resolving", async () => {
      showReport(await api("POST", "/api/resolve", { ...whoField(), pair_id: pairId, decision: decision,
                                                     reason: reason }));
      setStatus(`resolved: ${pairId} ${said(decision, reason)}`);
    });
  }

  function toggleView() {
    state.view = state.view === "review" ? "resolve" : "review";
    $("resolve").hidden = state.view !== "resolve";
    $("btn-disagreements").textContent = state.view === "resolve" ? "Back to review" : "Disagreements";
    showPair(state.pair);
    if (state.view === "resolve") {
      return run("report", async () => {
        showReport(await api("GET", "/api/report"));
        setStatus("disagreements loaded");
      });
    }
  }

  function begin(reviewer) {
    state.reviewer = reviewer;
    const query = state.tokens ? "" : "?reviewer=" + encodeURIComponent(reviewer);
    return run("loading", async () => {
      apply(await api("GET", "/api/next" + query));
      setStatus(`reviewing as ${reviewer}: a = accept, 1 2 3 = reject with a reason, z or Backspace = undo`);
    });
  }

  function showSignIn(tokens) {
    state.tokens = tokens;
    const field = tokens ? "token" : "reviewer";
    $(field).hidden = false;
    document.querySelector(`label[for="${field}"]`).hidden = false;
  }

  function showReasons(reasons) {
    state.reasons = reasons;
    document.querySelectorAll("button.answer[data-reason]").forEach((b) => {
      b.querySelector(".why").textContent = reasons[b.dataset.reason] || "";
    });
  }

  async function signInWithToken(token) {
    state.token = token;
    try {
      const who = await api("GET", "/api/whoami");
      sessionStorage.setItem("review.token", token);
      showReasons(who.reasons);
      return begin(who.reviewer);
    } catch (err) {
      state.token = "";
      sessionStorage.removeItem("review.token");
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
    const name = $("reviewer").value.trim();
    $("reviewer").blur();
    if (!name) return;
    localStorage.setItem("review.reviewer", name);
    begin(name);
  });
  document.querySelectorAll("button.answer").forEach((b) =>
    b.addEventListener("click", () => answer(b.dataset.decision, b.dataset.reason || null)));
  $("btn-undo").addEventListener("click", undo);
  $("btn-undo-done").addEventListener("click", undo);
  $("btn-disagreements").addEventListener("click", toggleView);

  document.addEventListener("keydown", (ev) => {
    const typing = ev.target instanceof HTMLInputElement || ev.target instanceof HTMLTextAreaElement;
    if (typing || ev.ctrlKey || ev.metaKey || ev.altKey || ev.repeat) return;
    const key = ev.key.toLowerCase();
    if (KEYS[key]) {
      ev.preventDefault();
      answer(KEYS[key][0], KEYS[key][1]);
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
      if (err.status !== 401) return setStatus(`cannot reach the review server: ${err.message}`, true);
      showSignIn(true);
      const hadToken = !!state.token;
      state.token = "";
      sessionStorage.removeItem("review.token");
      return setStatus(hadToken ? "your saved token was refused: enter your token" : "Enter your review token and press Start.",
                       hadToken);
    }
    showSignIn(who.tokens);
    showReasons(who.reasons);
    if (who.tokens) return begin(who.reviewer);
    setStatus("Enter your name and press Start.");
    const saved = localStorage.getItem("review.reviewer");
    if (saved) {
      $("reviewer").value = saved;
      begin(saved);
    }
  })();
})();
