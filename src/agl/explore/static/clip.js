// One clip's page: its sound and spectrogram, the true place and every run's guess on one
// map, each run's answer and reasoning, the counterfactual variants side by side (each run's
// guess under each on the map, and how far it moved), BirdNET's species and the speech stage.
"use strict";

(function () {
  const el = (...a) => AGL.el(...a);

  // An audio player over its spectrogram, with a playhead; or the note saying why not.
  function sound(media, id) {
    if (!media.url) return el("p", { class: "note", id: `${id}-note` }, media.note);
    const audio = el("audio", { id, controls: true, preload: "metadata", src: media.url });
    const box = el("div", { class: "spec" });
    const parts = [audio];
    if (media.spectrogram) {
      const img = el("img", { src: media.spectrogram, alt: "spectrogram (40 Hz to 16 kHz, log scale)" });
      const head = el("div", { class: "playhead" });
      img.addEventListener("error", () => box.replaceWith(el("p", { class: "note" }, "spectrogram could not be drawn for this file")));
      box.append(img, head);
      const move = () => {
        head.style.left = `${audio.duration ? (100 * audio.currentTime) / audio.duration : 0}%`;
        if (!audio.paused) requestAnimationFrame(move);
      };
      audio.addEventListener("play", move);
      audio.addEventListener("timeupdate", move);
      audio.addEventListener("seeked", move);
      box.addEventListener("click", (e) => {
        const r = box.getBoundingClientRect();
        if (audio.duration) audio.currentTime = ((e.clientX - r.left) / r.width) * audio.duration;
      });
      parts.push(box);
    } else if (media.spectrogram_note) {
      parts.push(el("p", { class: "note" }, media.spectrogram_note));
    }
    audio.addEventListener("error", () => audio.after(el("p", { class: "note" }, `audio could not be played (${media.url})`)));
    return el("div", { class: "sound" }, parts);
  }

  function place(g) {
    const words = [g.city, g.country, g.continent].filter((x) => x);
    return words.length ? words.join(", ") : "—";
  }

  function coords(g) {
    return g.latitude === null || g.latitude === undefined ? "no coordinates"
      : `${g.latitude.toFixed(2)}°, ${g.longitude.toFixed(2)}°`;
  }

  function kmCell(idx, g) {
    const info = idx.bands[g.band];
    const text = g.band < 5 && g.km !== null ? AGL.km(g.km) : info.label;
    const td = el("td", { class: `km band b${g.band}` }, text);
    td.style.background = info.colour;
    return td;
  }

  function verdict(g) {
    return g.wrong === 1 ? "wrong" : g.wrong === 0 ? "right" : "—";
  }

  function runsTable(idx, clip, colours) {
    const head = ["run", "status", "city", "country", "continent", "confidence", "error", "verdict", "reasoning"];
    const rows = clip.runs.map((g) => {
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = colours.get(g.run);
      const why = [];
      if (g.reasoning) why.push(el("div", { class: "reasoning" }, g.reasoning));
      else if (g.status && !g.raw_reply) why.push(el("div", { class: "note" }, "no reasoning in this record"));
      if (g.raw_reply) why.push(el("div", { class: "raw" }, el("b", {}, "raw reply: "), g.raw_reply));
      if (g.error) why.push(el("div", { class: "note" }, `error: ${g.error}`));
      if (g.note) why.push(el("div", { class: "note" }, g.note));
      return el("tr", { dataset: { run: g.run } },
        el("td", {}, swatch, g.run), el("td", {}, g.status || "—"), el("td", {}, g.city || "—"),
        el("td", {}, g.country || "—"), el("td", {}, g.continent || "—"),
        el("td", { class: "num" }, g.confidence === null || g.confidence === undefined ? "—" : String(g.confidence)),
        kmCell(idx, g), el("td", {}, verdict(g)), el("td", { class: "why" }, why));
    });
    return el("table", { class: "runs", id: "runs-table" },
      el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))), el("tbody", {}, rows));
  }

  function variantCard(idx, v, colours, onSelect) {
    const measures = Object.entries(v.measures || {})
      .filter(([, x]) => x !== null && x !== "")
      .map(([k, x]) => `${k.replaceAll("_", " ")} ${typeof x === "number" ? +x.toFixed(3) : x}`).join(" · ");
    const rows = v.runs.map((g) => {
      const swatch = el("span", { class: "swatch" });
      swatch.style.background = colours.get(g.run);
      if (g.note && g.band === undefined) {
        return el("tr", {}, el("td", {}, swatch, g.run), el("td", { colspan: 4, class: "note" }, g.note));
      }
      const moved = g.moved_km === null || g.moved_km === undefined ? "—" : AGL.km(g.moved_km);
      const delta = g.delta_km === null || g.delta_km === undefined ? "—"
        : `${g.delta_km > 0 ? "+" : ""}${AGL.km(g.delta_km)}`;
      return el("tr", { dataset: { run: g.run } }, el("td", {}, swatch, g.run),
        el("td", { title: g.reasoning || "" }, place(g)), kmCell(idx, g),
        el("td", { class: "num" }, delta), el("td", { class: "num moved" }, moved));
    });
    return el("div", { class: "variant", id: `variant-${v.id}` },
      el("h4", {}, el("button", { type: "button", class: "show-variant", dataset: { variantButton: v.id },
        onclick: () => onSelect(v.id) }, "show on map"), ` ${v.label}`, el("span", { class: "kind" }, ` (${v.kind})`)),
      measures ? el("p", { class: "measures" }, measures) : null,
      (v.notes || []).map((n) => el("p", { class: "note" }, n)),
      sound(v.audio, `player-${v.id}`),
      el("table", { class: "variant-runs" },
        el("thead", {}, el("tr", {}, ["run", "guess", "error", "Δ error", "moved"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)));
  }

  function birds(clip) {
    if (!clip.birds) return el("p", { class: "note" }, clip.birds_note || "no BirdNET table");
    const b = clip.birds;
    const items = [...b.species, ...b.others].map((d) => {
      const conf = d.max_confidence === undefined ? "" : ` ${d.max_confidence.toFixed(2)}`;
      const secs = d.seconds === undefined ? "" : ` · ${d.seconds} s`;
      return el("li", {}, d.common ? `${d.common} (${d.scientific})` : d.scientific, el("span", { class: "conf" }, conf + secs));
    });
    return el("div", {}, el("p", {}, `status ${b.status}${b.error ? ` (${b.error})` : ""}; ${b.species.length} species heard`),
      items.length ? el("ul", { class: "species" }, items) : null);
  }

  function speech(clip) {
    if (!clip.speech) return el("p", { class: "note" }, clip.speech_note || "no speech table");
    return el("dl", { class: "speech" }, Object.entries(clip.speech).map(([k, v]) => [el("dt", {}, k), el("dd", {}, String(v))]));
  }

  // Markers for the shown variant ("original": the runs' own guesses).
  function drawMap(map, idx, clip, variant, colours) {
    map.clear();
    const t = clip.truth;
    const shown = [t];
    const v = clip.variants.find((x) => x.id === variant);
    const before = new Map(clip.runs.map((g) => [g.run, g]));
    const guesses = v ? v.runs.filter((g) => g.band !== undefined) : clip.runs;
    for (const g of guesses) {
      if (g.latitude === null || g.latitude === undefined) continue;
      const colour = colours.get(g.run);
      const old = before.get(g.run);
      if (v && old && old.latitude !== null && old.latitude !== undefined) {
        map.line(old, g, "moved", colour);
        map.dot(old.latitude, old.longitude, "ghost", { run: g.run }).style.stroke = colour;
        shown.push(old);
      }
      const dot = map.dot(g.latitude, g.longitude, "guess", { run: g.run, variant: v ? v.id : "original",
        lat: g.latitude, lon: g.longitude });
      dot.style.fill = colour;
      let text = `${g.run} · ${g.km !== null && g.band < 5 ? AGL.km(g.km) : idx.bands[g.band].label}`;
      if (v && g.moved_km !== null && g.moved_km !== undefined) text += ` (moved ${AGL.km(g.moved_km)})`;
      map.label(g.latitude, g.longitude, text, "guess-label", { run: g.run });
      shown.push(g);
    }
    map.dot(t.latitude, t.longitude, "truth", { lat: t.latitude, lon: t.longitude }, 1.4).id = "truth-pin";
    map.label(t.latitude, t.longitude, "true place", "truth-label");
    map.fit(shown);
  }

  function legend(clip, variant, colours) {
    const v = clip.variants.find((x) => x.id === variant);
    const runs = v ? v.runs : clip.runs;
    const items = runs.map((g) => {
      const sw = el("span", { class: "swatch" });
      sw.style.background = colours.get(g.run);
      const missing = g.band === undefined ? " (did not listen)"
        : g.latitude === null || g.latitude === undefined ? " (no coordinates)" : "";
      return el("li", {}, sw, g.run + missing);
    });
    return el("ul", { class: "legend" }, el("li", {}, el("span", { class: "swatch truth" }), "true place"), items);
  }

  // Render `clip` into the clip view; `ctx`: idx, map (AGL.WorldMap), variant, onVariant(id).
  AGL.renderClip = function (clip, ctx) {
    const { idx } = ctx;
    const colours = new Map(idx.runs.map((r, i) => [r.name, AGL.runColour(i)]));
    const t = clip.truth;
    AGL.fill(AGL.$("clip-title"), el("code", {}, clip.key), " ", clip.title);
    const cats = Object.entries(clip.categories).filter(([, s]) => s >= 0.1).map(([k, s]) => `${k.replaceAll("_", " ")} ${s}`);
    AGL.fill(AGL.$("clip-meta"),
      el("span", { id: "truth-place" }, `True place: ${place(t)} (${coords(t)})`),
      ` · ${clip.seconds.toFixed(1)} s · sounds: ${cats.join(", ") || "none tagged"}`);
    AGL.$("clip-description").textContent = clip.description;
    AGL.fill(AGL.$("sound"), el("h3", {}, "Sound"), sound(clip.audio, "player"));
    const variantsBox = AGL.$("variants");
    const choose = el("div", { class: "variant-choice", role: "group", "aria-label": "shown on the map" },
      el("button", { type: "button", dataset: { variantButton: "original" }, onclick: () => ctx.onVariant("original") }, "original"),
      clip.variants.map((v) => el("button", { type: "button", dataset: { variantButton: v.id },
        onclick: () => ctx.onVariant(v.id) }, v.label)));
    AGL.fill(variantsBox, el("h3", {}, "Counterfactual variants"),
      clip.variants_note ? el("p", { class: "note", id: "variants-note" }, clip.variants_note) : null,
      clip.variants.length ? choose : null,
      clip.variants.map((v) => variantCard(idx, v, colours, ctx.onVariant)));
    AGL.fill(AGL.$("birds"), el("h3", {}, "BirdNET"), birds(clip));
    AGL.fill(AGL.$("speech"), el("h3", {}, "Speech"), speech(clip));
    AGL.fill(AGL.$("runs"), el("h3", {}, "Every run's answer"),
      clip.runs.length ? runsTable(idx, clip, colours) : el("p", { class: "note" }, "no runs found"));
    return AGL.showVariant(clip, ctx, ctx.variant);
  };

  AGL.showVariant = function (clip, ctx, variant) {
    const colours = new Map(ctx.idx.runs.map((r, i) => [r.name, AGL.runColour(i)]));
    const known = variant === "original" || clip.variants.some((v) => v.id === variant);
    const shown = known ? variant : "original";
    for (const b of document.querySelectorAll("[data-variant-button]")) {
      b.classList.toggle("active", b.dataset.variantButton === shown);
    }
    drawMap(ctx.map, ctx.idx, clip, shown, colours);
    AGL.fill(AGL.$("legend"),
      el("p", { class: "shown" }, shown === "original" ? "Map: each run's guess on the original clip"
        : `Map: each run's guess on ${clip.variants.find((v) => v.id === shown).label} (hollow: its guess on the original; the line: how far it moved)`),
      legend(clip, shown, colours));
    document.body.dataset.variant = shown;
    return { shown, problem: known ? null : `this clip has no variant ${variant}` };
  };
})();
