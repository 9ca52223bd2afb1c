// The clip list's filter and sort, and their place in the URL (the part after '#'), so a
// link names the same view: e.g. #every=wrong&continent=Europe&clip=demo_0002&v=mask_speech.default
//
//   continent, country     the clip's true place (exact)
//   speech                 yes | no (human_sounds >= 0.1, the paper's rule)
//   cat                    a sound category present (score >= 0.1)
//   birds                  heard | none | unknown (BirdNET)
//   every                  wrong | right: every run scored on the clip is wrong (right), and
//                          at least one was scored
//   only                   <run>: that run is right and no other scored run is
//   any                    refused | failed: at least one run refused (failed)
//   band                   <run>:<band> (repeatable): right, wrong, or a band name
//                          (lt25 lt200 lt750 lt2500 ge2500 refused failed nodistance unscored missing)
//   q                      text in the title or any run's reasoning (case-insensitive)
//   sort, desc             key title continent country seconds speech birds wrong run:<run>
//   clip, v                the clip page open, and the variant shown on its map
"use strict";

(function () {
  const SIMPLE = ["continent", "country", "speech", "cat", "birds", "every", "only", "any", "q"];
  const SORTS = ["key", "title", "continent", "country", "seconds", "speech", "birds", "wrong"];

  AGL.defaultFilters = () => ({
    continent: "", country: "", speech: "", cat: "", birds: "", every: "", only: "", any: "",
    q: "", conds: [], sort: "key", desc: false,
  });

  AGL.toHash = function (f, clip, variant) {
    const p = new URLSearchParams();
    for (const k of SIMPLE) if (f[k]) p.set(k, f[k]);
    for (const c of f.conds) p.append("band", `${c.run}:${c.band}`);
    if (f.sort && f.sort !== "key") p.set("sort", f.sort);
    if (f.desc) p.set("desc", "1");
    if (clip) p.set("clip", clip);
    if (clip && variant && variant !== "original") p.set("v", variant);
    const s = p.toString();
    return s ? `#${s}` : "#";
  };

  // The view a URL names; what it names that does not exist is listed in `problems`.
  AGL.parseHash = function (hash, idx) {
    const p = new URLSearchParams(hash.replace(/^#/, ""));
    const f = AGL.defaultFilters();
    const problems = [];
    const runs = new Set(idx.runs.map((r) => r.name));
    const allowed = {
      speech: ["yes", "no"], birds: ["heard", "none", "unknown"], every: ["wrong", "right"],
      any: ["refused", "failed"], cat: idx.categories,
    };
    const names = { continent: new Set(idx.clips.continent), country: new Set(idx.clips.country) };
    for (const k of SIMPLE) {
      let v = p.get(k);
      if (v === null || v === "") continue;
      if (names[k] && !names[k].has(v)) {
        // The report names groups as its protocol normalised them: find the manifest's name.
        const own = idx.aliases[k][v.toLowerCase()];
        if (own === undefined) { problems.push(`no clip has ${k} ${v}`); continue; }
        v = own;
      }
      if (allowed[k] && !allowed[k].includes(v)) { problems.push(`${k}=${v} is not a known value`); continue; }
      if (k === "only" && !runs.has(v)) { problems.push(`no run named ${v}`); continue; }
      f[k] = v;
    }
    for (const c of p.getAll("band")) {
      const at = c.lastIndexOf(":");
      const run = c.slice(0, at), band = c.slice(at + 1);
      if (at < 0 || !runs.has(run)) { problems.push(`band=${c}: no run named ${run || c}`); continue; }
      if (!["right", "wrong", ...AGL.BAND_SLUGS].includes(band)) { problems.push(`band=${c}: unknown band ${band}`); continue; }
      f.conds.push({ run, band });
    }
    const sort = p.get("sort");
    if (sort) {
      if (SORTS.includes(sort) || (sort.startsWith("run:") && runs.has(sort.slice(4)))) f.sort = sort;
      else problems.push(`sort=${sort} is not a column`);
    }
    f.desc = p.get("desc") === "1";
    return { f, clip: p.get("clip") || null, variant: p.get("v") || "original", problems };
  };

  // The clips the filter keeps, sorted: an array of row numbers.
  AGL.applyFilters = function (idx, f, text) {
    const c = idx.clips;
    const n = c.key.length;
    const R = idx.runs.length;
    const runAt = new Map(idx.runs.map((r, i) => [r.name, i]));
    const catBit = f.cat ? 1 << idx.categories.indexOf(f.cat) : 0;
    const only = f.only ? runAt.get(f.only) : -1;
    const conds = f.conds.map((x) => ({ r: runAt.get(x.run), band: x.band,
      code: AGL.BAND_SLUGS.indexOf(x.band) }));
    const q = f.q.trim().toLowerCase();
    const perRun = f.every || f.only || f.any;
    const out = [];
    for (let i = 0; i < n; i++) {
      if (f.continent && c.continent[i] !== f.continent) continue;
      if (f.country && c.country[i] !== f.country) continue;
      if (f.speech && c.speech[i] !== (f.speech === "yes" ? 1 : 0)) continue;
      if (catBit && !(c.cats[i] & catBit)) continue;
      if (f.birds) {
        const b = c.birds[i];
        if ((f.birds === "heard" && !(b > 0)) || (f.birds === "none" && b !== 0)
          || (f.birds === "unknown" && b !== -1)) continue;
      }
      if (perRun) {
        let wrong = 0, right = 0, refused = 0, failed = 0, othersRight = 0;
        for (let r = 0; r < R; r++) {
          const w = idx.wrong[r][i];
          if (w === 1) wrong++;
          else if (w === 0) { right++; if (r !== only) othersRight++; }
          const b = idx.band[r][i];
          if (b === 5) refused++;
          else if (b === 6) failed++;
        }
        if (f.every === "wrong" && !(wrong > 0 && right === 0)) continue;
        if (f.every === "right" && !(right > 0 && wrong === 0)) continue;
        if (only >= 0 && !(idx.wrong[only][i] === 0 && othersRight === 0)) continue;
        if (f.any === "refused" && !refused) continue;
        if (f.any === "failed" && !failed) continue;
      }
      let ok = true;
      for (const x of conds) {
        const w = idx.wrong[x.r][i];
        if ((x.band === "wrong" && w !== 1) || (x.band === "right" && w !== 0)
          || (x.code >= 0 && idx.band[x.r][i] !== x.code)) { ok = false; break; }
      }
      if (!ok) continue;
      if (q && !(text && text[i].includes(q))) continue;
      out.push(i);
    }
    return sortRows(idx, out, f);
  };

  function sortRows(idx, rows, f) {
    const c = idx.clips;
    let value;
    let numeric = true;
    if (f.sort.startsWith("run:")) {
      const r = idx.runs.findIndex((x) => x.name === f.sort.slice(4));
      // Distances first, then refusals, failures and the rest, by band.
      value = (i) => (idx.band[r][i] >= 5 ? 1e9 + idx.band[r][i] : idx.km[r][i] ?? 1e9);
    } else if (f.sort === "wrong") {
      value = (i) => idx.wrong.reduce((s, w) => s + (w[i] === 1 ? 1 : 0), 0);
    } else if (["seconds", "speech", "birds"].includes(f.sort)) {
      value = (i) => c[f.sort][i];
    } else {
      numeric = false;
      value = (i) => c[f.sort][i] || "";
    }
    const keys = new Map(rows.map((i) => [i, value(i)]));
    const collator = new Intl.Collator("en", { sensitivity: "base", numeric: true });
    const sign = f.desc ? -1 : 1;
    return rows.sort((a, b) => {
      const va = keys.get(a), vb = keys.get(b);
      const d = numeric ? va - vb : collator.compare(va, vb);
      return d !== 0 ? sign * d : a - b;
    });
  }
})();
