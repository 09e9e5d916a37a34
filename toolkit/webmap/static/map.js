// The map page of `toolkit serve`: Web Mercator XYZ tiles from /tiles, the legend and selectors
// from /meta, the value under the cursor and the level serving the view from /point. No map
// library: whole zoom steps, tiles at their own 256 px (no resampling in the browser, so a
// pixel shows exactly the colour the server painted). The view lives in the URL's hash
// (#zoom/lat/lon), so a view can be linked to and a script can move it.
"use strict";
(() => {
  const T = 256, MAX_ZOOM = 18, LAT = 85.05112878;
  const $ = (id) => document.getElementById(id);
  const mapEl = $("map"), tilesEl = $("tiles");
  // what a test or a script reads: tiles pending/loaded/failed, the level and version shown
  const state = { meta: null, variable: null, sel: {}, touched: {}, z: 1, cx: 0, cy: 0,
                  pending: 0, loaded: 0, failed: 0, level: null, version: null };
  window.toolkitMap = state;

  const world = (z) => T * 2 ** z;
  const lonToX = (lon, z) => ((lon + 180) / 360) * world(z);
  const latToY = (lat, z) => {
    const s = Math.sin((Math.max(-LAT, Math.min(LAT, lat)) * Math.PI) / 180);
    return (0.5 - Math.log((1 + s) / (1 - s)) / (4 * Math.PI)) * world(z);
  };
  const xToLon = (x, z) => (x / world(z)) * 360 - 180;
  const yToLat = (y, z) =>
    (180 / Math.PI) * Math.atan(Math.sinh(Math.PI - (2 * Math.PI * y) / world(z)));

  function query(extra) {
    const p = new URLSearchParams({ variable: state.variable });
    for (const [dim, label] of Object.entries(state.sel)) p.set(dim, label);
    for (const [k, v] of Object.entries(extra || {})) p.set(k, v);
    return p.toString();
  }

  function status(text) { $("status").textContent = text || ""; }

  async function getJSON(url) {
    const r = await fetch(url, { cache: "no-store" });
    if (!r.ok) throw new Error(`${url.split("?")[0]}: ${await r.text()}`);
    return r.json();
  }

  // ------------------------------------------------------------------ the tiles
  function settle(img, ok) {
    if (img.dataset.done) return;
    img.dataset.done = "1";
    state.pending -= 1;
    if (ok) state.loaded += 1; else state.failed += 1;
  }

  function render() {
    if (!state.meta) return;
    const W = mapEl.clientWidth, H = mapEl.clientHeight, n = 2 ** state.z;
    const left = Math.round(state.cx - W / 2), top = Math.round(state.cy - H / 2);
    const q = query({ v: state.version });
    const want = new Map();
    for (let ty = Math.max(0, Math.floor(top / T)); ty <= Math.min(n - 1, Math.floor((top + H - 1) / T)); ty++) {
      for (let tx = Math.floor(left / T); tx <= Math.floor((left + W - 1) / T); tx++) {
        const wx = ((tx % n) + n) % n;
        want.set(`${tx},${ty}`, { url: `/tiles/${state.z}/${wx}/${ty}.png?${q}`, x: tx * T - left, y: ty * T - top });
      }
    }
    for (const img of [...tilesEl.children]) {
      const w = want.get(img.dataset.key);
      if (!w || w.url !== img.dataset.url) { settle(img, false); state.failed -= 1; img.remove(); }
    }
    const have = new Map([...tilesEl.children].map((img) => [img.dataset.key, img]));
    for (const [key, w] of want) {
      let img = have.get(key);
      if (!img) {
        img = new Image(T, T);
        Object.assign(img.dataset, { key, url: w.url });
        img.className = "tile";
        img.alt = "";
        img.draggable = false;
        state.pending += 1;
        img.onload = () => settle(img, true);
        img.onerror = () => settle(img, false);
        img.src = w.url;
        tilesEl.appendChild(img);
      }
      img.style.left = `${w.x}px`;
      img.style.top = `${w.y}px`;
    }
    $("zoom-level").textContent = String(state.z);
    writeHash();
    showLevel();
  }

  // ------------------------------------------------------------------ the view and the URL
  function centre() { return [yToLat(state.cy, state.z), xToLon(state.cx, state.z)]; }

  function setView(z, lat, lon) {
    state.z = Math.max(0, Math.min(MAX_ZOOM, Math.round(z)));
    state.cx = lonToX(lon, state.z);
    state.cy = latToY(lat, state.z);
  }

  let written = "";
  function writeHash() {
    const [lat, lon] = centre();
    written = `#${state.z}/${lat.toFixed(5)}/${lon.toFixed(5)}`;
    if (location.hash !== written) history.replaceState(null, "", written);
  }

  function readHash() {
    const m = /^#(\d+)\/(-?[\d.]+)\/(-?[\d.]+)$/.exec(location.hash);
    if (!m) return false;
    setView(Number(m[1]), Number(m[2]), Number(m[3]));
    return true;
  }

  function fit(bbox) {
    const [w, s, e, n] = bbox || [-180, -LAT, 180, LAT];
    const W = mapEl.clientWidth, H = mapEl.clientHeight;
    let z = MAX_ZOOM;
    while (z > 0 && (lonToX(e, z) - lonToX(w, z) > W || latToY(s, z) - latToY(n, z) > H)) z--;
    const east = e < w ? e + 360 : e;
    setView(z, (Math.max(s, -LAT) + Math.min(n, LAT)) / 2, (w + east) / 2);
  }

  function zoomAt(dz, px, py) {
    const z = Math.max(0, Math.min(MAX_ZOOM, state.z + dz));
    if (z === state.z) return;
    const W = mapEl.clientWidth, H = mapEl.clientHeight, f = 2 ** (z - state.z);
    const ox = px - W / 2, oy = py - H / 2;
    state.cx = (state.cx + ox) * f - ox;
    state.cy = (state.cy + oy) * f - oy;
    state.z = z;
    render();
  }

  // ------------------------------------------------------------------ what is shown
  let levelTimer = null, levelAsked = 0;
  function showLevel() {  // once the view settles: a drag renders many times a second
    clearTimeout(levelTimer);
    const asked = ++levelAsked;
    levelTimer = setTimeout(async () => {
      const [lat, lon] = centre();
      try {
        const p = await getJSON(`/point?${query({ lat, lon, zoom: state.z })}`);
        if (asked !== levelAsked) return;  // the view moved on while this was asked
        state.level = p.level;
        $("level").textContent = p.level === "0" ? "0 (level 0, full resolution)" : p.level;
      } catch (err) { status(err.message); }
    }, 80);
  }

  let pointTimer = null;
  function showValue(ev) {
    const r = mapEl.getBoundingClientRect();
    const x = state.cx - mapEl.clientWidth / 2 + (ev.clientX - r.left);
    const y = state.cy - mapEl.clientHeight / 2 + (ev.clientY - r.top);
    const lat = yToLat(y, state.z), lon = ((xToLon(x, state.z) + 540) % 360) - 180;
    clearTimeout(pointTimer);
    pointTimer = setTimeout(async () => {
      try {
        const p = await getJSON(`/point?${query({ lat, lon, zoom: state.z })}`);
        const v = p.value === null ? "no data" : `${formatValue(p.value)} ${p.units || ""}`.trim();
        $("value").textContent = `${v} at ${lat.toFixed(3)}, ${lon.toFixed(3)} (level ${p.level})`;
      } catch (err) { status(err.message); }
    }, 60);
  }

  function formatValue(v) {
    const classes = legendOf()?.classes;
    const named = classes && classes.find((c) => c.value === v);
    if (named) return `${named.meaning} (${v})`;
    return Math.abs(v) >= 1000 || Number.isInteger(v) ? String(Math.round(v * 100) / 100) : v.toPrecision(4);
  }

  const legendOf = () => state.meta && state.meta.variables[state.variable].legend;

  function drawLegend() {
    const lg = legendOf(), el = $("legend");
    el.replaceChildren();
    const title = document.createElement("div");
    title.textContent = [lg.label || state.variable, lg.units ? `(${lg.units})` : ""].join(" ").trim();
    el.appendChild(title);
    if (lg.kind === "classes") {
      for (const c of lg.classes) {
        const row = document.createElement("div");
        const sw = document.createElement("span");
        sw.className = "swatch";
        sw.style.background = c.color;
        row.append(sw, `${c.meaning} (${c.value})`);
        el.appendChild(row);
      }
      return;
    }
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.style.background = `linear-gradient(to right, ${lg.colors.join(", ")})`;
    const ends = document.createElement("div");
    ends.className = "ends";
    for (const v of [lg.vmin, lg.vmax]) {
      const s = document.createElement("span");
      s.textContent = `${formatValue(v)} ${lg.units || ""}`.trim();
      ends.appendChild(s);
    }
    el.append(bar, ends);
  }

  function drawSelectors() {
    const el = $("selectors");
    el.replaceChildren();
    for (const lead of state.meta.variables[state.variable].leading) {
      const label = document.createElement("label");
      label.htmlFor = `sel-${lead.dim}`;
      label.textContent = lead.dim;
      const sel = document.createElement("select");
      sel.id = `sel-${lead.dim}`;
      for (const l of lead.labels) sel.add(new Option(l, l));
      const keep = state.touched[lead.dim] && lead.labels.includes(state.sel[lead.dim]);
      state.sel[lead.dim] = keep ? state.sel[lead.dim] : lead.default;
      sel.value = state.sel[lead.dim];
      sel.onchange = () => { state.sel[lead.dim] = sel.value; state.touched[lead.dim] = true; render(); };
      el.append(label, sel);
    }
  }

  function apply(meta) {
    if (!meta.variables[state.variable]) state.variable = meta.default_variable;
    if (!meta.variables[state.variable].legend) {  // legends come per variable: ask for this one's
      getJSON(`/meta?variable=${encodeURIComponent(state.variable)}`).then(apply, (err) => status(err.message));
      return;
    }
    const first = !state.meta;
    state.meta = meta;
    state.version = meta.version;
    $("title").textContent = meta.title;
    $("source").textContent = meta.source;
    $("version").textContent = meta.kind === "repo" ? `snapshot ${meta.version}` : `metadata ${meta.version}`;
    const vs = $("variable");
    vs.replaceChildren(...Object.entries(meta.variables).map(([k, v]) => new Option(`${k}: ${v.label}`, k)));
    vs.value = state.variable;
    state.sel = Object.fromEntries(Object.entries(state.sel).filter(([d]) => state.touched[d]));
    drawSelectors();
    drawLegend();
    if (first && !readHash()) fit(meta.bbox);
    render();
  }

  const known = () => state.meta && state.meta.variables[state.variable];
  const metaURL = () => (known() ? `/meta?variable=${encodeURIComponent(state.variable)}` : "/meta");

  async function poll() {
    try {
      const meta = await getJSON(metaURL());
      if (meta.version !== state.version) apply(meta);
      status("");
    } catch (err) { status(err.message); }
    setTimeout(poll, Math.max(0.5, (state.meta && state.meta.refresh) || 2) * 1000);
  }

  // ------------------------------------------------------------------ input
  $("variable").onchange = async () => {
    state.variable = $("variable").value;
    state.sel = {};
    state.touched = {};
    try {
      apply(await getJSON(metaURL()));  // with this variable's legend
    } catch (err) { status(err.message); }
  };
  $("zoom-in").onclick = () => zoomAt(1, mapEl.clientWidth / 2, mapEl.clientHeight / 2);
  $("zoom-out").onclick = () => zoomAt(-1, mapEl.clientWidth / 2, mapEl.clientHeight / 2);
  let drag = null;
  mapEl.addEventListener("pointerdown", (ev) => {
    if (ev.target.closest("#zoom")) return;
    drag = { x: ev.clientX, y: ev.clientY };
    mapEl.setPointerCapture(ev.pointerId);
    mapEl.classList.add("dragging");
  });
  mapEl.addEventListener("pointermove", (ev) => {
    if (drag) {
      state.cx -= ev.clientX - drag.x;
      state.cy = Math.max(0, Math.min(world(state.z), state.cy - (ev.clientY - drag.y)));
      drag = { x: ev.clientX, y: ev.clientY };
      render();
    }
    showValue(ev);
  });
  mapEl.addEventListener("pointerup", () => { drag = null; mapEl.classList.remove("dragging"); });
  let wheelAt = 0;
  mapEl.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    if (ev.timeStamp - wheelAt < 250) return;  // one step per wheel gesture
    wheelAt = ev.timeStamp;
    const r = mapEl.getBoundingClientRect();
    zoomAt(ev.deltaY < 0 ? 1 : -1, ev.clientX - r.left, ev.clientY - r.top);
  }, { passive: false });
  addEventListener("hashchange", () => { if (location.hash !== written && readHash()) render(); });
  addEventListener("resize", render);
  state.variable = new URLSearchParams(location.search).get("variable");
  poll();
})();
