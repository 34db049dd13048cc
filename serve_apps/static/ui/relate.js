// The "try it" page: an image, boxes drawn or detected, a vocabulary, and the ranked triplets the
// relation model returns for them. Everything goes through the same /v1 API a client uses, with
// the same bearer token (kept in sessionStorage: this tab only), so the page can do nothing a
// token holder could not do with curl. Box coordinates are kept in image pixels; the canvas only
// scales them for display. URLs are relative, so the page works under any Serve route prefix (they resolve against /ui/relate.html).
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const HANDLE = 6;          // display pixels: minimum drag for a new box
  const COLOURS = ["#e69f00", "#0072b2", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#7f7f7f", "#b8860b"];
  const state = {
    token: sessionStorage.getItem("relate.token") || "",
    image: null,             // HTMLImageElement of the chosen file
    dataUrl: "",             // the file as a data: URL (the API accepts the prefix)
    name: "image",
    boxes: [],               // [{x1, y1, x2, y2, label}] in image pixels
    selected: -1,
    drag: null,              // {kind: "new"|"move", x0, y0, box0}
    answer: null,            // last /v1/relations or /v1/graph response
    seq: 0,                  // request counter: only the newest answer is shown
    timer: 0,
  };
  const canvas = $("canvas"), ctx = canvas.getContext("2d");

  function setStatus(text, isError) {
    $("status").textContent = text;
    $("status").className = isError ? "error" : "muted";
  }

  function headers() {
    const h = { "Content-Type": "application/json" };
    if (state.token) h.Authorization = "Bearer " + state.token;
    return h;
  }

  async function post(path, body, asBlob) {
    const res = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body), cache: "no-store" });
    if (!res.ok) {
      const data = await res.json().catch(() => ({}));
      const msg = data.message || (typeof data.detail === "string" ? data.detail : JSON.stringify(data.detail || data));
      const hint = res.status === 401 ? " (enter the API token above)" : "";
      throw new Error(`HTTP ${res.status}: ${msg || res.statusText}${hint}`);
    }
    return asBlob ? res.blob() : res.json();
  }

  function vocabulary() {
    const words = $("vocabulary").value.split(/[\n,]/).map((s) => s.trim()).filter((s) => s.length > 0);
    return Array.from(new Set(words));
  }

  function topk() {
    const k = parseInt($("topk").value, 10);
    return Number.isFinite(k) && k > 0 ? k : 10;
  }

  function boxBody() {
    return state.boxes.map((b) => ({ x1: b.x1, y1: b.y1, x2: b.x2, y2: b.y2, label: b.label || null }));
  }

  function vocabBody() {
    const v = vocabulary();
    return v.length ? { vocabulary: v } : {};
  }

  // ---- drawing ----------------------------------------------------------------------------
  function scale() { return canvas.width / state.image.naturalWidth; }

  function centre(b) { return [(b.x1 + b.x2) / 2, (b.y1 + b.y2) / 2]; }

  function arrow(a, b, colour) {
    ctx.strokeStyle = colour; ctx.fillStyle = colour; ctx.lineWidth = 2;
    ctx.beginPath(); ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); ctx.stroke();
    const ang = Math.atan2(b[1] - a[1], b[0] - a[0]), h = 9;
    ctx.beginPath(); ctx.moveTo(b[0], b[1]);
    ctx.lineTo(b[0] - h * Math.cos(ang - 0.4), b[1] - h * Math.sin(ang - 0.4));
    ctx.lineTo(b[0] - h * Math.cos(ang + 0.4), b[1] - h * Math.sin(ang + 0.4));
    ctx.closePath(); ctx.fill();
  }

  function draw() {
    if (!state.image) return;
    const s = scale();
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.drawImage(state.image, 0, 0, canvas.width, canvas.height);
    const shown = state.answer ? state.answer.triplets.slice(0, 5) : [];
    for (const t of shown) {   // edges of the best triplets, subject -> object
      const a = state.boxes[t.subject], b = state.boxes[t.object];
      if (!a || !b) continue;
      const [ax, ay] = centre(a), [bx, by] = centre(b);
      arrow([ax * s, ay * s], [bx * s, by * s], COLOURS[t.subject % COLOURS.length]);
      ctx.font = "13px system-ui, sans-serif";
      const label = t.predicate, mx = (ax + bx) * s / 2, my = (ay + by) * s / 2;
      const w = ctx.measureText(label).width + 6;
      ctx.fillStyle = "rgba(255,255,255,.85)"; ctx.fillRect(mx - w / 2, my - 9, w, 17);
      ctx.fillStyle = "#1d1d1f"; ctx.fillText(label, mx - w / 2 + 3, my + 4);
    }
    state.boxes.forEach((b, i) => {
      const colour = COLOURS[i % COLOURS.length];
      ctx.lineWidth = i === state.selected ? 4 : 2;
      ctx.strokeStyle = i === state.selected ? "#d81b60" : colour;
      ctx.strokeRect(b.x1 * s, b.y1 * s, (b.x2 - b.x1) * s, (b.y2 - b.y1) * s);
      const tag = String(i + 1) + (b.label ? " " + b.label : "");
      ctx.font = "bold 13px system-ui, sans-serif";
      const w = ctx.measureText(tag).width + 8;
      ctx.fillStyle = colour; ctx.fillRect(b.x1 * s, b.y1 * s, w, 18);
      ctx.fillStyle = "#fff"; ctx.fillText(tag, b.x1 * s + 4, b.y1 * s + 14);
    });
  }

  function showTriplets() {
    const body = $("triplets").querySelector("tbody");
    body.textContent = "";
    const rows = state.answer ? state.answer.triplets : [];
    rows.forEach((t, i) => {
      const tr = document.createElement("tr");
      const cells = [String(i + 1), `${t.subject + 1}${labelOf(t.subject)}`, t.predicate,
                     `${t.object + 1}${labelOf(t.object)}`, t.score.toFixed(3)];
      cells.forEach((text, j) => {
        const td = document.createElement("td");
        td.textContent = text;       // never innerHTML: predicates are user text
        if (j === 0 || j === 4) td.className = "num";
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    const ok = !!state.answer;
    $("download-json").disabled = !ok;
    $("download-png").disabled = !ok;
  }

  function labelOf(i) {
    const b = state.boxes[i];
    return b && b.label ? ` (${b.label})` : "";
  }

  function boxesChanged() {
    state.answer = null;
    $("box-count").textContent = `${state.boxes.length} box${state.boxes.length === 1 ? "" : "es"}`;
    $("delete").disabled = state.selected < 0;
    $("clear").disabled = state.boxes.length === 0;
    $("relate").disabled = state.boxes.length < 2;
    showTriplets();
    draw();
    schedule();
  }

  // ---- requests -----------------------------------------------------------------------------
  function schedule() {
    clearTimeout(state.timer);
    if (state.image && state.boxes.length >= 2) state.timer = setTimeout(relate, 400);
  }

  async function relate() {
    if (!state.image || state.boxes.length < 2) return;
    const seq = ++state.seq;
    setStatus("Scoring...");
    try {
      const answer = await post("../v1/relations", { image: state.dataUrl, boxes: boxBody(), topk: topk(), ...vocabBody() });
      if (seq !== state.seq) return;       // a newer request is on its way
      state.answer = answer;
      setStatus(`${answer.triplets.length} triplets over ${state.boxes.length} boxes and ` +
                `${answer.vocabulary_size} predicates (${answer.bank}).`);
      showTriplets(); draw();
    } catch (err) {
      if (seq === state.seq) setStatus(err.message, true);
    }
  }

  async function detect() {
    const seq = ++state.seq;
    setStatus("Detecting...");
    try {
      const answer = await post("../v1/graph", { image: state.dataUrl, topk: topk(), ...vocabBody() });
      if (seq !== state.seq) return;
      state.boxes = answer.regions.map((r) => ({ x1: r.x1, y1: r.y1, x2: r.x2, y2: r.y2, label: r.label }));
      state.selected = -1;
      boxesChanged();
      clearTimeout(state.timer);           // the graph answer already scores these boxes
      state.answer = answer.regions.length >= 2 ? answer : null;
      setStatus(`${answer.regions.length} boxes detected, ${answer.triplets.length} triplets.`);
      showTriplets(); draw();
    } catch (err) {
      if (seq === state.seq) setStatus(err.message, true);
    }
  }

  function download(blob, name) {
    const a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = name;
    document.body.appendChild(a); a.click(); a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  }

  function downloadJson() {
    const graph = { image: state.name, boxes: boxBody(), vocabulary: vocabulary(), ...state.answer };
    download(new Blob([JSON.stringify(graph, null, 2)], { type: "application/json" }), `${state.name}.graph.json`);
  }

  async function downloadPng() {
    setStatus("Rendering...");
    try {
      const triplets = state.answer.triplets.slice(0, topk()).map((t) => ({ subject: t.subject, object: t.object,
                                                                           predicate: t.predicate }));
      const png = await post("../v1/render", { image: state.dataUrl, boxes: boxBody(), triplets: triplets }, true);
      download(png, `${state.name}.graph.png`);
      setStatus("PNG rendered by the server.");
    } catch (err) {
      setStatus(err.message, true);
    }
  }

  // ---- image in -------------------------------------------------------------------------------
  function load(file) {
    if (!file || !file.type.startsWith("image/")) { setStatus("That is not an image file.", true); return; }
    const reader = new FileReader();
    reader.onerror = () => setStatus(`Could not read ${file.name}.`, true);
    reader.onload = () => {
      const img = new Image();
      img.onerror = () => setStatus(`${file.name}: the browser cannot decode this image.`, true);
      img.onload = () => {
        state.image = img; state.dataUrl = reader.result; state.name = file.name.replace(/\.[^.]*$/, "") || "image";
        const width = Math.min(img.naturalWidth * Math.max(1, 480 / img.naturalWidth), 960);
        canvas.width = Math.round(width);
        canvas.height = Math.round(width * img.naturalHeight / img.naturalWidth);
        canvas.hidden = false; $("drop-hint").hidden = true; $("detect").disabled = false;
        state.boxes = []; state.selected = -1;
        boxesChanged();
        setStatus(`${file.name}: ${img.naturalWidth} x ${img.naturalHeight}. Drag on the image to draw boxes.`);
      };
      img.src = reader.result;
    };
    reader.readAsDataURL(file);
  }

  // ---- boxes by mouse -------------------------------------------------------------------------
  function at(ev) {
    const r = canvas.getBoundingClientRect(), s = scale() * r.width / canvas.width;
    return [(ev.clientX - r.left) / s, (ev.clientY - r.top) / s];
  }

  function hit(x, y) {
    for (let i = state.boxes.length - 1; i >= 0; i--) {
      const b = state.boxes[i];
      if (x >= b.x1 && x <= b.x2 && y >= b.y1 && y <= b.y2) return i;
    }
    return -1;
  }

  function clampBox(b) {
    const W = state.image.naturalWidth, H = state.image.naturalHeight;
    const w = b.x2 - b.x1, h = b.y2 - b.y1;
    const x1 = Math.min(Math.max(0, b.x1), W - w), y1 = Math.min(Math.max(0, b.y1), H - h);
    return { ...b, x1: x1, y1: y1, x2: x1 + w, y2: y1 + h };
  }

  canvas.addEventListener("pointerdown", (ev) => {
    if (!state.image) return;
    canvas.setPointerCapture(ev.pointerId);
    const [x, y] = at(ev), i = hit(x, y);
    state.selected = i;
    state.drag = i >= 0 ? { kind: "move", x0: x, y0: y, box0: { ...state.boxes[i] } }
                        : { kind: "new", x0: x, y0: y, box0: null };
    $("delete").disabled = i < 0;
    draw();
  });

  canvas.addEventListener("pointermove", (ev) => {
    const d = state.drag;
    if (!d) return;
    const [x, y] = at(ev), W = state.image.naturalWidth, H = state.image.naturalHeight;
    if (d.kind === "move") {
      const b = d.box0;
      state.boxes[state.selected] = clampBox({ ...b, x1: b.x1 + x - d.x0, y1: b.y1 + y - d.y0,
                                               x2: b.x2 + x - d.x0, y2: b.y2 + y - d.y0 });
    } else {
      const cx = Math.min(Math.max(0, x), W), cy = Math.min(Math.max(0, y), H);
      d.box0 = { x1: Math.min(d.x0, cx), y1: Math.min(d.y0, cy), x2: Math.max(d.x0, cx), y2: Math.max(d.y0, cy),
                 label: null };
      draw();
      const s = scale();
      ctx.setLineDash([5, 4]); ctx.strokeStyle = "#d81b60"; ctx.lineWidth = 2;
      ctx.strokeRect(d.box0.x1 * s, d.box0.y1 * s, (d.box0.x2 - d.box0.x1) * s, (d.box0.y2 - d.box0.y1) * s);
      ctx.setLineDash([]);
      return;
    }
    draw();
  });

  canvas.addEventListener("pointerup", () => {
    const d = state.drag;
    state.drag = null;
    if (!d) return;
    if (d.kind === "new") {
      const b = d.box0, s = scale();
      if (b && (b.x2 - b.x1) * s >= HANDLE && (b.y2 - b.y1) * s >= HANDLE) {
        state.boxes.push(b);
        state.selected = state.boxes.length - 1;
      }
      boxesChanged();
    } else if (d.box0 && state.boxes[state.selected] &&
               (state.boxes[state.selected].x1 !== d.box0.x1 || state.boxes[state.selected].y1 !== d.box0.y1)) {
      boxesChanged();
    } else {
      draw();
    }
  });

  function removeSelected() {
    if (state.selected < 0) return;
    state.boxes.splice(state.selected, 1);
    state.selected = -1;
    boxesChanged();
  }

  document.addEventListener("keydown", (ev) => {
    if (ev.target instanceof HTMLInputElement || ev.target instanceof HTMLTextAreaElement) return;
    if (ev.key === "Delete" || ev.key === "Backspace") { ev.preventDefault(); removeSelected(); }
  });

  // ---- wiring -----------------------------------------------------------------------------
  $("token").value = state.token;
  $("auth").addEventListener("submit", (ev) => {
    ev.preventDefault();
    state.token = $("token").value.trim();
    sessionStorage.setItem("relate.token", state.token);
    setStatus(state.token ? "Token set for this tab." : "No token: only a loopback server without one answers.");
    schedule();
  });
  $("file").addEventListener("change", (ev) => load(ev.target.files[0]));
  const drop = $("drop");
  drop.addEventListener("dragover", (ev) => { ev.preventDefault(); drop.classList.add("over"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (ev) => {
    ev.preventDefault(); drop.classList.remove("over");
    load(ev.dataTransfer.files[0]);
  });
  $("detect").addEventListener("click", detect);
  $("delete").addEventListener("click", removeSelected);
  $("clear").addEventListener("click", () => { state.boxes = []; state.selected = -1; boxesChanged(); });
  $("relate").addEventListener("click", relate);
  $("vocabulary").addEventListener("input", schedule);
  $("topk").addEventListener("change", schedule);
  $("download-json").addEventListener("click", downloadJson);
  $("download-png").addEventListener("click", downloadPng);
})();
