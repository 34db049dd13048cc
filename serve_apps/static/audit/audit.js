// The audit page: one relation at a time, verdicts sent straight to the server (which commits
// each one), so nothing lives only in the browser except the auditor's name (localStorage).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const state = { auditor: "", item: null, busy: false };
  const KEYS = { t: "true", f: "false", u: "unsure" };

  function setStatus(text, isError) {
    $("status").textContent = text;
    $("status").className = isError ? "error" : "muted";
  }

  async function api(method, path, body) {
    const res = await fetch(path, {
      method: method,
      headers: body ? { "Content-Type": "application/json" } : {},
      body: body ? JSON.stringify(body) : undefined,
    });
    const data = await res.json().catch(() => ({}));
    if (!res.ok) {
      const msg = typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail || data);
      throw new Error(msg || res.statusText);
    }
    return data;
  }

  function showProgress(p) {
    $("progress-bar").max = Math.max(1, p.total);
    $("progress-bar").value = p.judged;
    $("progress-text").textContent = `${p.judged} / ${p.total} judged by ${p.auditor}`;
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
    // Size the picture's box before the picture arrives, so nothing moves when it does.
    $("scene").width = item.display.width;
    $("scene").height = item.display.height;
    $("scene").src = "/api/image?item_id=" + encodeURIComponent(item.item_id);
    main.dataset.itemId = item.item_id;
    main.hidden = false;
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

  function judge(verdict) {
    if (!state.item) return;
    const item = state.item;
    return run("saving", async () => {
      const data = await api("POST", "/api/verdict", { auditor: state.auditor, item_id: item.item_id, verdict: verdict });
      apply(data);
      setStatus(`saved: ${item.item_id} is ${verdict}`);
    });
  }

  function undo() {
    return run("undo", async () => {
      const data = await api("POST", "/api/undo", { auditor: state.auditor });
      apply(data);
      setStatus(data.undone ? `undone: ${data.undone}` : "nothing to undo");
    });
  }

  function start(name) {
    state.auditor = name.trim();
    if (!state.auditor) return;
    localStorage.setItem("audit.auditor", state.auditor);
    return run("loading", async () => {
      apply(await api("GET", "/api/next?auditor=" + encodeURIComponent(state.auditor)));
      setStatus(`auditing as ${state.auditor}: t = true, f = false, u = unsure, z or Backspace = undo`);
    });
  }

  $("who").addEventListener("submit", (ev) => {
    ev.preventDefault();
    start($("auditor").value);
    $("auditor").blur();
  });
  document.querySelectorAll("button.verdict").forEach((b) =>
    b.addEventListener("click", () => judge(b.dataset.verdict)));
  $("btn-undo").addEventListener("click", undo);
  $("btn-undo-done").addEventListener("click", undo);

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

  const saved = localStorage.getItem("audit.auditor");
  if (saved) {
    $("auditor").value = saved;
    start(saved);
  }
})();
