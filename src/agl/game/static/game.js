// The listening game's page. Talks only to the server that served it (see server.py).
// The map is an SVG in degree units: x = longitude, y = -latitude (viewBox -180 -90 360 180),
// so a click becomes a coordinate through the SVG's own screen transform.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const WORLD = { x: -180, y: -90, w: 360, h: 180 };
const $ = (id) => document.getElementById(id);

let svg = null;
let overlay = null;
let view = { ...WORLD };
let clip = null;       // the clip being played: {clip_id, number, seconds, audio_url}
let pin = null;        // the player's guess: {latitude, longitude}
let answered = false;  // the current clip has a saved answer (its place is shown)

async function api(path, body) {
  const init = body === undefined ? {} : {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  };
  const response = await fetch(path, init);
  const data = await response.json();
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

function showProgress(s) {
  const mean = s.mean_km === null ? "–" : `${Math.round(s.mean_km).toLocaleString("en")} km`;
  $("progress").textContent =
    `${s.answered} of ${s.total} answered · ${s.skipped} skipped · ` +
    `score ${s.score.toLocaleString("en")} / ${s.max_score.toLocaleString("en")} · ` +
    `mean error ${mean}`;
}

function message(text) { $("message").textContent = text || ""; }

// --- map ---------------------------------------------------------------------------------

async function loadMap() {
  const text = await (await fetch("/map.svg")).text();
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  svg = document.importNode(doc.documentElement, true);
  $("map").appendChild(svg);
  overlay = svg.querySelector("#overlay");
  svg.addEventListener("wheel", onWheel, { passive: false });
  svg.addEventListener("pointerdown", onPointerDown);
}

function setView(v) {
  const w = Math.min(Math.max(v.w, 2), WORLD.w);
  const h = w / 2;
  const x = Math.min(Math.max(v.x, WORLD.x), WORLD.x + WORLD.w - w);
  const y = Math.min(Math.max(v.y, WORLD.y), WORLD.y + WORLD.h - h);
  view = { x, y, w, h };
  svg.setAttribute("viewBox", `${x} ${y} ${w} ${h}`);
  const r = w / 150;  // markers keep their size on screen at every zoom
  for (const dot of overlay.querySelectorAll("circle")) dot.setAttribute("r", r);
}

function toDegrees(event) {
  const point = svg.createSVGPoint();
  point.x = event.clientX;
  point.y = event.clientY;
  const p = point.matrixTransform(svg.getScreenCTM().inverse());
  const clamp = (v, lim) => Math.min(Math.max(v, -lim), lim);
  return { latitude: +clamp(-p.y, 90).toFixed(4), longitude: +clamp(p.x, 180).toFixed(4) };
}

function onWheel(event) {
  event.preventDefault();
  const at = toDegrees(event);
  const factor = event.deltaY < 0 ? 0.8 : 1.25;
  const w = view.w * factor;
  const fx = (at.longitude - view.x) / view.w;
  const fy = (-at.latitude - view.y) / view.h;
  setView({ x: at.longitude - fx * w, y: -at.latitude - fy * (w / 2), w });
}

function onPointerDown(event) {
  const start = { x: event.clientX, y: event.clientY, view: { ...view } };
  const scale = view.w / svg.getBoundingClientRect().width;  // degrees per screen pixel
  let dragged = false;
  const move = (e) => {
    const dx = e.clientX - start.x;
    const dy = e.clientY - start.y;
    if (Math.abs(dx) + Math.abs(dy) > 4) dragged = true;
    if (dragged) setView({ ...start.view, x: start.view.x - dx * scale, y: start.view.y - dy * scale });
  };
  const up = (e) => {
    window.removeEventListener("pointermove", move);
    window.removeEventListener("pointerup", up);
    if (!dragged) placePin(toDegrees(e));
  };
  window.addEventListener("pointermove", move);
  window.addEventListener("pointerup", up);
}

function dot(latitude, longitude, cls) {
  const c = document.createElementNS(SVG_NS, "circle");
  c.setAttribute("cx", longitude);
  c.setAttribute("cy", -latitude);
  c.setAttribute("r", view.w / 150);
  c.setAttribute("class", cls);
  c.setAttribute("vector-effect", "non-scaling-stroke");
  overlay.appendChild(c);
  return c;
}

function placePin(at) {
  if (!clip || answered) return;
  pin = at;
  overlay.replaceChildren();
  dot(at.latitude, at.longitude, "guess").id = "guess-pin";
  $("pin").textContent = `${at.latitude.toFixed(2)}°, ${at.longitude.toFixed(2)}°`;
  $("submit").disabled = false;
}

function drawResult(result) {
  overlay.replaceChildren();
  for (const piece of result.path || []) {
    const line = document.createElementNS(SVG_NS, "polyline");
    line.setAttribute("points", piece.map(([lon, lat]) => `${lon},${-lat}`).join(" "));
    line.setAttribute("class", "arc");
    line.setAttribute("vector-effect", "non-scaling-stroke");
    overlay.appendChild(line);
  }
  if (result.guess.latitude !== null) dot(result.guess.latitude, result.guess.longitude, "guess");
  dot(result.truth.latitude, result.truth.longitude, "truth").id = "truth-pin";
}

// --- rounds ------------------------------------------------------------------------------

function listenedSeconds() {
  const played = $("player").played;
  let total = 0;
  for (let i = 0; i < played.length; i++) total += played.end(i) - played.start(i);
  return Math.round(total * 1000) / 1000;
}

async function load() {
  const state = await api("/api/state");
  showProgress(state);
  $("run-name").textContent = state.run;
  clip = state.current;
  pin = null;
  answered = false;
  overlay.replaceChildren();
  setView(WORLD);
  $("result").hidden = true;
  $("pin").textContent = "none yet";
  for (const id of ["city", "country", "continent"]) $(id).value = "";
  $("submit").disabled = true;
  $("skip").disabled = false;
  if (!clip) {
    $("play").hidden = true;
    $("finished").hidden = false;
    document.body.dataset.clip = "";
    $("player").removeAttribute("src");
    return;
  }
  $("play").hidden = false;
  $("clip-number").textContent = clip.number;
  $("clip-total").textContent = state.total;
  $("clip-seconds").textContent = Math.round(clip.seconds);
  $("player").src = clip.audio_url;
  document.body.dataset.clip = clip.clip_id;
}

async function answer(path, body) {
  $("submit").disabled = true;
  $("skip").disabled = true;
  message("");
  try {
    const reply = await api(path, { clip_id: clip.clip_id, listened_s: listenedSeconds(), ...body });
    answered = true;
    $("player").pause();
    showProgress(reply);
    showResult(reply.result);
  } catch (err) {
    message(err.message);
    $("submit").disabled = pin === null;
    $("skip").disabled = false;
  }
}

function showResult(r) {
  const t = r.truth;
  $("result-title").textContent = r.skipped ? "Skipped." : "Saved.";
  $("truth-place").textContent = [t.city, t.country, t.continent].filter(Boolean).join(", ");
  $("truth-coords").textContent = `(${t.latitude.toFixed(2)}°, ${t.longitude.toFixed(2)}°)`;
  $("error-line").hidden = r.distance_km === null;
  $("error-km").textContent = r.distance_km === null ? "" : r.distance_km.toFixed(1);
  $("round-score").textContent = r.score;
  $("result").hidden = false;
  drawResult(r);
}

function submitGuess() {
  if (!pin) { message("Click the map to place your guess first."); return; }
  const text = (id) => $(id).value.trim() || null;
  answer("/api/guess", {
    latitude: pin.latitude,
    longitude: pin.longitude,
    city: text("city"),
    country: text("country"),
    continent: text("continent"),
  });
}

async function start() {
  try {
    await loadMap();
    const state = await api("/api/state");
    for (const name of state.continents) {
      const option = document.createElement("option");
      option.value = option.textContent = name;
      $("continent").appendChild(option);
    }
    $("submit").addEventListener("click", submitGuess);
    $("skip").addEventListener("click", () => answer("/api/skip", {}));
    $("next").addEventListener("click", () => load().catch((e) => message(e.message)));
    await load();
    document.body.dataset.ready = "1";
  } catch (err) {
    message(`Could not start the game: ${err.message}`);
  }
}

document.addEventListener("DOMContentLoaded", start);
