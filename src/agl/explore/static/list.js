// The clip list: one row per clip, one coloured cell per run (its error band and km).
// Virtualised: only the rows in view (and a few around) exist in the page, so 1,444 clips
// x 20 runs scroll and re-filter without building 30,000 cells.
"use strict";

(function () {
  const ROW_H = 28;
  const OVERSCAN = 12;

  class ClipList {
    // idx: the index data; hrefFor(row) -> the link of a row's clip page; onSort(column).
    constructor(root, idx, hrefFor, onSort) {
      this.idx = idx;
      this.hrefFor = hrefFor;
      this.order = [];
      const c = idx.clips;
      // `drop`: the order in which a column gives way when the window is too narrow for all
      // (its values stay on the clip page and in the filters); the title shrinks first.
      this.all = [
        { sort: "key", label: "Clip", width: 10.5, cell: (i) => c.key[i] },
        { sort: "title", label: "Title", width: 22, min: 7, cell: (i) => c.title[i] },
        { sort: "continent", label: "Continent", width: 7.5, drop: 1, cell: (i) => c.continent[i] },
        { sort: "country", label: "Country", width: 8.5, cell: (i) => c.country[i] },
        { sort: "seconds", label: "Length", width: 4.6, drop: 2, cell: (i) => `${Math.round(c.seconds[i] ?? 0)} s`, cls: "num" },
        { sort: "speech", label: "Speech", width: 4.8, drop: 4, cell: (i) => (c.speech[i] ? "yes" : "no") },
      ];
      if (c.language) this.all.push({ sort: null, label: "Language", width: 6, drop: 3, cell: (i) => c.language[i] });
      this.all.push({ sort: "birds", label: "Birds", width: 4, drop: 5, cls: "num",
        cell: (i) => (c.birds[i] < 0 ? "—" : String(c.birds[i])) });
      this.all.push({ sort: "wrong", label: "Wrong", width: 4.6, cls: "num",
        cell: (i) => String(idx.wrong.reduce((s, w) => s + (w[i] === 1 ? 1 : 0), 0)) });
      this.onSort = onSort;
      this.sorted = null;

      this.viewport = AGL.el("div", { class: "viewport", id: "viewport", tabindex: "0" });
      this.head = AGL.el("div", { class: "thead", role: "row" });
      this.body = AGL.el("div", { class: "tbody", id: "rows" });
      this.viewport.append(this.head, this.body);
      root.replaceChildren(this.viewport);
      this.layout();
      let queued = false;
      this.viewport.addEventListener("scroll", () => {
        if (queued) return;
        queued = true;
        requestAnimationFrame(() => { queued = false; this.render(); });
      });
      // Laid out again whenever the list's box changes size: a resized window, and the list
      // shown after a clip page was opened first (hidden, it had no width to fit).
      new ResizeObserver(() => {
        if (!this.viewport.clientWidth) return;
        if (this.layout()) this.render(true); else this.render();
      }).observe(this.viewport);
    }

    // The columns that fit the list's width (issue 50: at 1,280 px the demo's 5 runs were
    // past the right edge): every run's column always, the title shrunk to its minimum, then
    // the droppable columns dropped in their order; wider than that it scrolls. Fixed widths
    // for every row (CSS variables): a row's layout never depends on its text, so each row is
    // laid out and painted on its own (contain: strict). True when the columns changed.
    layout() {
      const em = parseFloat(getComputedStyle(this.viewport).fontSize) || 16;
      // the box's width less a vertical scrollbar's (it comes with the rows)
      const avail = ((this.viewport.clientWidth || window.innerWidth) - 18) / em - 0.3;
      const RUN_W = 5.4;
      const runs = this.idx.runs.length * RUN_W;
      let cols = this.all.slice();
      const width = (list, title) => list.reduce((s, col) => s + (col.sort === "title" ? title : col.width), runs);
      const droppable = cols.filter((col) => col.drop).sort((a, b) => a.drop - b.drop);
      while (width(cols, 7) > avail && droppable.length) {
        const gone = droppable.shift();
        cols = cols.filter((col) => col !== gone);
      }
      const fixed = width(cols, 0);
      const title = Math.max(7, Math.min(22, avail - fixed));
      const names = cols.map((col) => col.label).join("|");
      if (names === this.shown && title === this.titleW) return false;
      this.shown = names;
      this.titleW = title;
      this.columns = cols;
      const widths = [...cols.map((col) => `${col.sort === "title" ? title : col.width}em`),
        ...this.idx.runs.map(() => `${RUN_W}em`)];
      this.viewport.style.setProperty("--cols", widths.join(" "));
      this.viewport.style.setProperty("--row-w", `${fixed + title}em`);
      this.head.replaceChildren();
      for (const col of cols) {
        this.head.append(AGL.el("button", { type: "button", class: `th ${col.cls || ""}`,
          dataset: { sort: col.sort || "" }, disabled: !col.sort, onclick: () => this.onSort(col.sort) }, col.label));
      }
      this.idx.runs.forEach((run, r) => {
        const th = AGL.el("button", { type: "button", class: "th run", title: `${run.name}: sort by its error`,
          dataset: { sort: `run:${run.name}` }, onclick: () => this.onSort(`run:${run.name}`) },
        AGL.el("span", { class: "swatch" }), run.name);
        th.firstChild.style.background = AGL.runColour(r);
        this.head.append(th);
      });
      if (this.sorted) this.markSorted(this.sorted);
      return true;
    }

    markSorted(f) {
      this.sorted = f;
      for (const th of this.head.children) {
        th.classList.toggle("sorted", th.dataset.sort === f.sort);
        th.classList.toggle("desc", th.dataset.sort === f.sort && f.desc);
      }
    }

    show(order, f) {
      this.order = order;
      this.body.style.height = `${order.length * ROW_H}px`;
      this.markSorted(f);
      this.render(true);
    }

    scrollTo(row) {
      const at = this.order.indexOf(row);
      if (at < 0) return;
      const top = at * ROW_H;
      const v = this.viewport;
      const head = this.head.offsetHeight;
      if (top < v.scrollTop || top + ROW_H > v.scrollTop + v.clientHeight - head) {
        v.scrollTop = Math.max(0, top - v.clientHeight / 3);
      }
    }

    render(force) {
      const v = this.viewport;
      const head = this.head.offsetHeight;
      const first = Math.max(0, Math.floor((v.scrollTop - head) / ROW_H) - OVERSCAN);
      const last = Math.min(this.order.length, Math.ceil((v.scrollTop + v.clientHeight) / ROW_H) + OVERSCAN);
      if (!force && first === this.first && last === this.last) return;
      this.first = first;
      this.last = last;
      // A scroll keeps the rows still in view and builds only those that come into it;
      // a new filter or sort (force) builds them all.
      if (force || !this.rows) {
        this.rows = new Map();
        this.body.replaceChildren();
      }
      for (const [k, row] of this.rows) {
        if (k < first || k >= last) { row.remove(); this.rows.delete(k); }
      }
      const lowest = this.rows.size ? Math.min(...this.rows.keys()) : last;
      const before = [], after = [];
      for (let k = first; k < last; k++) {
        if (this.rows.has(k)) continue;
        const row = this.makeRow(k);
        this.rows.set(k, row);
        (k < lowest ? before : after).push(row);
      }
      this.body.prepend(...before);
      this.body.append(...after);
    }

    makeRow(k) {
      const idx = this.idx;
      const i = this.order[k];
      const row = document.createElement("a");
      row.className = "row";
      row.href = this.hrefFor(i);
      row.dataset.key = idx.clips.key[i];
      row.style.top = `${k * ROW_H}px`;
      for (const col of this.columns) {
        const cell = document.createElement("span");
        cell.className = col.cls ? `td ${col.cls}` : "td";
        cell.textContent = col.cell(i);
        row.appendChild(cell);
      }
      // the title in full, and what the narrow columns left out
      row.firstChild.nextSibling.title = [idx.clips.title[i], ...this.all.filter((col) => !this.columns.includes(col))
        .map((col) => `${col.label}: ${col.cell(i)}`)].join(" · ");
      for (let r = 0; r < idx.runs.length; r++) row.append(this.runCell(r, i));
      return row;
    }

    runCell(r, i) {
      const idx = this.idx;
      const band = idx.band[r][i];
      const km = idx.km[r][i];
      const info = idx.bands[band];
      const text = band < 5 ? AGL.km(km).replace(" km", "") : AGL.BAND_SHORT[band];
      const verdict = idx.wrong[r][i] === 1 ? "wrong" : idx.wrong[r][i] === 0 ? "right" : "not judged";
      const cell = document.createElement("span");
      cell.className = `td band b${band}`;
      cell.dataset.run = idx.runs[r].name;
      cell.title = `${idx.runs[r].name}: ${info.label}${km !== null && band < 5 ? ` (${AGL.km(km)})` : ""}, ${verdict}`;
      cell.textContent = text;
      cell.style.background = info.colour;
      return cell;
    }
  }

  AGL.ClipList = ClipList;
})();
