// The world map of a clip page: the game's map (agl play), with many markers and labels.
// The SVG is in degree units: x = longitude, y = -latitude (viewBox -180 -90 360 180).
// Scroll zooms, drag pans; markers and labels keep their size on screen at every zoom.
"use strict";

(function () {
  const WORLD = { x: -180, y: -90, w: 360, h: 180 };

  class WorldMap {
    constructor(container, svgText) {
      const doc = new DOMParser().parseFromString(svgText, "image/svg+xml");
      this.svg = document.importNode(doc.documentElement, true);
      container.replaceChildren(this.svg);
      this.overlay = this.svg.querySelector("#overlay");
      this.view = { ...WORLD };
      this.svg.addEventListener("wheel", (e) => this.onWheel(e), { passive: false });
      this.svg.addEventListener("pointerdown", (e) => this.onPointerDown(e));
    }

    clear() { this.overlay.replaceChildren(); }

    setView(v) {
      const w = Math.min(Math.max(v.w, 2), WORLD.w);
      const h = w / 2;
      const x = Math.min(Math.max(v.x, WORLD.x), WORLD.x + WORLD.w - w);
      const y = Math.min(Math.max(v.y, WORLD.y), WORLD.y + WORLD.h - h);
      this.view = { x, y, w, h };
      this.svg.setAttribute("viewBox", `${x} ${y} ${w} ${h}`);
      const r = w / 160;
      for (const c of this.overlay.querySelectorAll("circle")) {
        c.setAttribute("r", r * Number(c.dataset.size || 1));
      }
      this.layoutLabels(r);
    }

    // The smallest view (at least 30° wide) holding every point, with a margin.
    fit(points) {
      const pts = points.filter((p) => p.latitude !== null && p.longitude !== null);
      if (!pts.length) { this.setView(WORLD); return; }
      const xs = pts.map((p) => p.longitude);
      const ys = pts.map((p) => -p.latitude);
      const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
      // Labels run to the right of their markers: room for them on that side.
      const w = Math.max(30, (x1 - x0) * 1.6, (y1 - y0) * 2 * 1.35);
      this.setView({ x: (x0 + x1) / 2 - w * 0.42, y: (y0 + y1) / 2 - w / 4, w });
    }

    dot(lat, lon, cls, data, size) {
      const c = AGL.el("svg:circle", { cx: lon, cy: -lat, r: this.view.w / 160, class: cls,
        "vector-effect": "non-scaling-stroke" });
      Object.assign(c.dataset, data || {}, { size: size || 1 });
      this.overlay.appendChild(c);
      return c;
    }

    line(a, b, cls, colour) {
      const l = AGL.el("svg:line", { x1: a.longitude, y1: -a.latitude, x2: b.longitude,
        y2: -b.latitude, class: cls, "vector-effect": "non-scaling-stroke" });
      if (colour) l.style.stroke = colour;
      this.overlay.insertBefore(l, this.overlay.firstChild);
      return l;
    }

    label(lat, lon, text, cls, data) {
      const t = AGL.el("svg:text", { class: cls, text });
      Object.assign(t.dataset, data || {}, { lat, lon });
      this.overlay.appendChild(t);
      return t;
    }

    // Labels beside their markers; one that would cover another label, or a marker (a guess
    // near another's label was hidden under that label's halo), moves down a line.
    layoutLabels(r) {
      const fs = this.view.w / 75;
      // Boxes in degrees: left edge, width, top and bottom. A label's box runs from its
      // baseline up by the font's ascent and down by its descent (with the halo); a marker's is
      // its circle. (Was: a marker as a label-height box at its centre, which a label pushed
      // down past a pile of others could still cover when two runs answered the same point.)
      const up = fs * 0.95, down = fs * 0.3, gap = fs * 0.05;
      const placed = [...this.overlay.querySelectorAll("circle")].map((c) => {
        const rr = Number(c.getAttribute("r")), cy = Number(c.getAttribute("cy"));
        return { x: Number(c.getAttribute("cx")) - rr, w: 2 * rr, top: cy - rr, bottom: cy + rr };
      });
      const labels = [...this.overlay.querySelectorAll("text")];
      labels.sort((a, b) => (-a.dataset.lat) - (-b.dataset.lat));
      for (const t of labels) {
        const x = Number(t.dataset.lon) + r * (t.classList.contains("truth-label") ? 2.6 : 2.0);
        let y = -Number(t.dataset.lat) + fs * 0.35;
        t.setAttribute("font-size", fs);
        // Its rendered width (an estimate per letter let two labels touch: "5,861 kmknn · ..."),
        // and a gap of half a letter.
        const w = (t.getComputedTextLength() || t.textContent.length * fs * 0.6) + fs * 0.5;
        for (let guard = 0; guard < 60; guard++) {
          const hit = placed.find((p) => x < p.x + p.w && p.x < x + w
                                         && y - up < p.bottom + gap && p.top - gap < y + down);
          if (!hit) break;
          y = hit.bottom + gap + up + gap;  // the next line below what it would cover
        }
        placed.push({ x, w, top: y - up, bottom: y + down });
        t.setAttribute("x", x);
        t.setAttribute("y", y);
        t.style.strokeWidth = fs * 0.22;  // the halo, in degrees like everything else here
      }
    }

    toDegrees(event) {
      const point = this.svg.createSVGPoint();
      point.x = event.clientX;
      point.y = event.clientY;
      const p = point.matrixTransform(this.svg.getScreenCTM().inverse());
      return { latitude: -p.y, longitude: p.x };
    }

    onWheel(event) {
      event.preventDefault();
      const at = this.toDegrees(event);
      const w = this.view.w * (event.deltaY < 0 ? 0.8 : 1.25);
      const fx = (at.longitude - this.view.x) / this.view.w;
      const fy = (-at.latitude - this.view.y) / this.view.h;
      this.setView({ x: at.longitude - fx * w, y: -at.latitude - fy * (w / 2), w });
    }

    onPointerDown(event) {
      const start = { x: event.clientX, y: event.clientY, view: { ...this.view } };
      const scale = this.view.w / this.svg.getBoundingClientRect().width;
      const move = (e) => {
        this.setView({ ...start.view, x: start.view.x - (e.clientX - start.x) * scale,
          y: start.view.y - (e.clientY - start.y) * scale });
      };
      const up = () => {
        window.removeEventListener("pointermove", move);
        window.removeEventListener("pointerup", up);
      };
      window.addEventListener("pointermove", move);
      window.addEventListener("pointerup", up);
    }
  }

  AGL.WorldMap = WorldMap;
})();
