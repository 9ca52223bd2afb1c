// The explorer's data arrives as script files that call AGL_EXPLORE.receive(name, data):
// a page opened from file:// may not fetch() files, but it may load scripts beside it, so
// the same page runs served by `agl explore` and from an exported folder.
// Every text from the data is put into the page as text (textContent, text nodes,
// setAttribute), never parsed as markup: titles and model replies are untrusted.
"use strict";

window.AGL = {};

(function () {
  const received = new Map();
  const pending = new Map();  // name -> {resolve, reject, promise}

  window.AGL_EXPLORE = {
    receive(name, data) {
      received.set(name, data);
      const p = pending.get(name);
      if (p) { pending.delete(name); p.resolve(data); }
    },
  };

  // The data `name`, loading `src` once; rejects with one sentence if it cannot.
  AGL.load = function (name, src) {
    if (received.has(name)) return Promise.resolve(received.get(name));
    if (pending.has(name)) return pending.get(name).promise;
    const entry = {};
    entry.promise = new Promise((resolve, reject) => { entry.resolve = resolve; entry.reject = reject; });
    pending.set(name, entry);
    const s = document.createElement("script");
    s.src = src;
    s.onload = () => {
      s.remove();
      if (pending.get(name) === entry) {
        pending.delete(name);
        entry.reject(new Error(`${src} loaded but held no data named ${name}`));
      }
    };
    s.onerror = () => {
      s.remove();
      pending.delete(name);
      entry.reject(new Error(`could not load ${src}`));
    };
    document.head.appendChild(s);
    return entry.promise;
  };

  AGL.$ = (id) => document.getElementById(id);

  // An element with properties and children; strings become text nodes, never markup.
  AGL.el = function (tag, props, ...children) {
    const svg = tag.startsWith("svg:");
    const e = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.setAttribute("class", v);
      else if (k === "text") e.textContent = v;
      else if (k === "dataset") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? "" : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c !== null && c !== undefined && c !== false) e.append(c);
    }
    return e;
  };

  // Replace an element's children: arrays flattened, null/undefined/false left out.
  AGL.fill = function (parent, ...children) {
    parent.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
    return parent;
  };

  AGL.km = function (km) {
    if (km === null || km === undefined) return "";
    return km < 100 ? `${km.toFixed(1)} km` : `${Math.round(km).toLocaleString("en")} km`;
  };

  // One colour per run, the same in the list and on the map.
  const PALETTE = ["#1f77b4", "#ff7f0e", "#9467bd", "#d62728", "#17becf", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#2ca02c", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
    "#3182bd", "#e6550d", "#31a354", "#756bb1", "#636363"];
  AGL.runColour = (i) => PALETTE[i % PALETTE.length];

  // Error bands by code (agl.explore.payload): their names in URLs.
  AGL.BAND_SLUGS = ["lt25", "lt200", "lt750", "lt2500", "ge2500", "refused", "failed",
    "nodistance", "unscored", "missing"];
  AGL.BAND_SHORT = [null, null, null, null, null, "refused", "failed", "no km", "unscored", "—"];
})();
