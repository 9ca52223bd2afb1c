// The explorer's page: the filter form, the list, the clip view, and the URL that names them.
// Every change of the filter rewrites the URL (replaceState); opening a clip is a new history
// entry, so the browser's Back returns to the list. A URL opened later shows the same view.
"use strict";

(function () {
  const $ = AGL.$;
  const el = (...a) => AGL.el(...a);
  const S = { idx: null, f: AGL.defaultFilters(), order: [], text: null, list: null, map: null,
    clipRow: null, clipData: null, variant: "original", rowOf: new Map(), token: 0 };

  function message(text) { $("message").textContent = text || ""; }

  function counts(values) {
    const m = new Map();
    for (const v of values) m.set(v, (m.get(v) || 0) + 1);
    return [...m.entries()].sort((a, b) => a[0].localeCompare(b[0]));
  }

  function options(select, entries, anyLabel) {
    AGL.fill(select, el("option", { value: "" }, anyLabel),
      entries.map(([value, label]) => el("option", { value }, label)));
  }

  function buildFilters() {
    const idx = S.idx;
    const c = idx.clips;
    options($("f-continent"), counts(c.continent).map(([v, n]) => [v, `${v || "(none)"} (${n})`]), "any continent");
    options($("f-speech"), [["yes", "speech"], ["no", "no speech"]], "speech or not");
    options($("f-cat"), idx.categories.map((k) => [k, k.replaceAll("_", " ")]), "any sound category");
    options($("f-birds"), [["heard", "birds heard"], ["none", "no birds heard"], ["unknown", "BirdNET did not listen"]], "birds or not");
    options($("f-every"), [["wrong", "every run wrong"], ["right", "every run right"]], "all runs: any outcome");
    options($("f-only"), idx.runs.map((r) => [r.name, `only ${r.name} right`]), "only one run right: —");
    options($("f-any"), [["refused", "some run refused"], ["failed", "some run failed"]], "refused / failed: —");
    options($("cond-run"), idx.runs.map((r) => [r.name, r.name]), "run…");
    options($("cond-band"), [["wrong", "wrong"], ["right", "right"],
      ...idx.bands.map((b, k) => [AGL.BAND_SLUGS[k], b.label])], "is…");
    for (const id of ["f-continent", "f-country", "f-speech", "f-cat", "f-birds", "f-every", "f-only", "f-any"]) {
      $(id).addEventListener("change", fromForm);
    }
    let timer = null;
    $("f-q").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(fromForm, 150); });
    $("cond-add").addEventListener("click", () => {
      const run = $("cond-run").value, band = $("cond-band").value;
      if (!run || !band) { message("Choose a run and a band first."); return; }
      S.f.conds.push({ run, band });
      changed();
    });
    $("filters").addEventListener("submit", (e) => e.preventDefault());  // Enter: no reload
    $("f-reset").addEventListener("click", () => { S.f = AGL.defaultFilters(); fillForm(); changed(); });
    $("f-only").disabled = $("cond-run").disabled = idx.runs.length === 0;
  }

  function countryOptions() {
    const c = S.idx.clips;
    const keep = c.country.filter((_, i) => !S.f.continent || c.continent[i] === S.f.continent);
    options($("f-country"), counts(keep).map(([v, n]) => [v, `${v || "(none)"} (${n})`]), "any country");
  }

  function fillForm() {
    countryOptions();
    for (const k of ["continent", "country", "speech", "cat", "birds", "every", "only", "any"]) {
      const select = $(`f-${k}`);
      if (S.f[k] && ![...select.options].some((o) => o.value === S.f[k])) {
        select.append(el("option", { value: S.f[k] }, `${S.f[k]} (0)`));
      }
      select.value = S.f[k];
    }
    if ($("f-q").value !== S.f.q) $("f-q").value = S.f.q;
    AGL.fill($("conds"), S.f.conds.map((cond, k) => el("span", { class: "chip" },
      `${cond.run} is ${bandLabel(cond.band)}`,
      el("button", { type: "button", title: "remove", onclick: () => { S.f.conds.splice(k, 1); changed(); } }, "×"))));
  }

  function bandLabel(slug) {
    const k = AGL.BAND_SLUGS.indexOf(slug);
    return k >= 0 ? S.idx.bands[k].label : slug;
  }

  function fromForm() {
    const before = S.f.continent;
    for (const k of ["continent", "country", "speech", "cat", "birds", "every", "only", "any"]) S.f[k] = $(`f-${k}`).value;
    if (S.f.continent !== before) { countryOptions(); S.f.country = ""; }
    S.f.q = $("f-q").value;
    changed();
  }

  async function changed() {
    fillForm();
    history.replaceState(null, "", AGL.toHash(S.f));
    await refilter();
  }

  async function ensureText() {
    if (S.text) return;
    document.body.dataset.text = "loading";
    const data = await AGL.load("text", "data/text.js");
    S.text = data.text.map((t) => t.toLowerCase());
    document.body.dataset.text = "ready";
  }

  async function refilter() {
    if (S.f.q.trim()) {
      try { await ensureText(); } catch (e) { message(`Free-text filter unavailable: ${e.message}`); }
    }
    const t0 = performance.now();
    S.order = AGL.applyFilters(S.idx, S.f, S.text);
    S.list.show(S.order, S.f);
    const total = S.idx.clips.key.length;
    $("count").textContent = `${S.order.length.toLocaleString("en")} of ${total.toLocaleString("en")} clips`;
    document.body.dataset.count = S.order.length;
    document.body.dataset.renderMs = (performance.now() - t0).toFixed(2);
    document.body.dataset.rendered = AGL.toHash(S.f);  // the filter the list now shows
  }

  function showNotes() {
    const idx = S.idx;
    const items = [...idx.notes.map((n) => ["data", n])];
    for (const r of idx.runs) for (const n of r.notes) items.push([r.name, n]);
    for (const n of [idx.birds_note, idx.speech_note, idx.variants_note]) if (n) items.push(["data", n]);
    const box = $("notes");
    box.hidden = items.length === 0;
    AGL.fill(box, el("summary", {}, `${items.length} note(s) about these outputs`),
      el("ul", {}, items.map(([who, n]) => el("li", {}, el("b", {}, `${who}: `), n))));
  }

  function sortBy(column) {
    if (!column) return;
    S.f.desc = S.f.sort === column ? !S.f.desc : false;
    S.f.sort = column;
    changed();
  }

  // --- views -----------------------------------------------------------------------------

  function showList() {
    for (const a of document.querySelectorAll("audio")) a.pause();
    $("clip-view").hidden = true;
    $("list-view").hidden = false;
    document.body.dataset.view = "list";
    document.body.dataset.clip = "";
    S.list.render(true);
    if (S.clipRow !== null) S.list.scrollTo(S.clipRow);
  }

  function clipNav(row) {
    const at = S.order.indexOf(row);
    const key = (i) => S.idx.clips.key[i];
    $("back").href = AGL.toHash(S.f);
    const link = (id, k) => {
      const a = $(id);
      a.hidden = k < 0 || k >= S.order.length;
      if (!a.hidden) a.href = AGL.toHash(S.f, key(S.order[k]));
    };
    link("prev", at < 0 ? -1 : at - 1);
    link("next", at < 0 ? -1 : at + 1);
    $("position").textContent = at < 0 ? `not in the current filter (${S.order.length} clips)`
      : `${at + 1} of ${S.order.length} in the current filter`;
  }

  async function showClip(key, variant) {
    const row = S.rowOf.get(key);
    if (row === undefined) { showList(); message(`No clip ${key} in these outputs.`); return; }
    const token = ++S.token;
    $("list-view").hidden = true;
    $("clip-view").hidden = false;
    document.body.dataset.view = "clip";
    clipNav(row);
    if (!S.map) S.map = new AGL.WorldMap($("map"), await AGL.load("map", "data/map.js"));
    let data;
    try {
      data = await AGL.load(`clip:${row}`, `data/clips/${row}.js`);
    } catch (e) {
      message(`Could not load clip ${key}: ${e.message}`);
      return;
    }
    if (token !== S.token) return;  // another clip was asked for meanwhile
    S.variant = variant;
    const ctx = { idx: S.idx, map: S.map, variant, onVariant: selectVariant };
    let shown;
    if (S.clipRow !== row) {
      for (const a of document.querySelectorAll("audio")) a.pause();
      S.clipRow = row;
      S.clipData = data;
      shown = AGL.renderClip(data, ctx);
    } else {
      shown = AGL.showVariant(data, ctx, variant);
    }
    if (shown.problem) message(`The link names what these outputs lack: ${shown.problem}.`);
    document.body.dataset.clip = key;
    window.scrollTo(0, 0);
  }

  function selectVariant(id) {
    S.variant = id;
    const shown = AGL.showVariant(S.clipData, { idx: S.idx, map: S.map }, id);
    history.replaceState(null, "", AGL.toHash(S.f, S.clipData.key, shown.shown));
  }

  async function route() {
    const { f, clip, variant, problems } = AGL.parseHash(location.hash, S.idx);
    S.f = f;
    fillForm();
    await refilter();
    message(problems.length ? `The link names what these outputs lack: ${problems.join("; ")}.` : "");
    if (clip) await showClip(clip, variant);
    else showList();
  }

  function onKey(e) {
    if (document.body.dataset.view !== "clip" || e.target.closest("input, select, textarea")) return;
    const go = { n: "next", p: "prev", Escape: "back" }[e.key];
    if (go && !$(go).hidden) location.hash = $(go).getAttribute("href");
  }

  async function start() {
    try {
      S.idx = await AGL.load("index", "data/index.js");
    } catch (e) {
      message(`Could not start the explorer: ${e.message}`);
      return;
    }
    const idx = S.idx;
    idx.clips.key.forEach((k, i) => S.rowOf.set(k, i));
    $("dataset").textContent = `${idx.dataset} · ${idx.runs.length} run(s) · protocol ${idx.protocol}`;
    buildFilters();
    showNotes();
    S.list = new AGL.ClipList($("table"), idx, (i) => AGL.toHash(S.f, idx.clips.key[i]), sortBy);
    window.addEventListener("hashchange", () => route().catch((e) => message(e.message)));
    document.addEventListener("keydown", onKey);
    await route();
    document.body.dataset.readyMs = performance.now().toFixed(1);  // since navigation start
    document.body.dataset.ready = "1";
  }

  document.addEventListener("DOMContentLoaded", () => start().catch((e) => message(`Could not start the explorer: ${e.message}`)));
})();
