/* tracesand's live dashboard: the sanitized feed (GET /feed, Server-Sent
 * Events read with fetch() so that the bearer token travels in a header),
 * drawn on a Leaflet map with a graticule of its own; optional tiles and
 * the density estimates of the profiles that keep one (GET /density/NAME).
 *
 * Everything shown is what the daemon published: it serves no raw input.
 */
'use strict';

(function () {
  // Newest points kept on the map, and how long they take to fade.
  const MAX_POINTS = 5000;
  const FADE_MS = 2 * 60 * 1000;
  const FADE_FLOOR = 0.12;
  const FADE_EVERY_MS = 1000;
  const FOLLOW_EVERY_MS = 1000;
  const DENSITY_EVERY_MS = 10 * 1000;
  // A profile without an estimate (404) is asked again this rarely.
  const DENSITY_ABSENT_EVERY_MS = 60 * 1000;
  const RECONNECT_FIRST_MS = 1000;
  const RECONNECT_MAX_MS = 15000;
  const TOKEN_KEY = 'tracesand.token';
  const PALETTE = ['#d7263d', '#1b998b', '#2e86ab', '#f46036', '#7b2cbf',
                   '#c5a300', '#3a7d44', '#e84393', '#5c4d7d', '#8d6a9f',
                   '#00798c', '#a44a3f'];
  // Graticule steps in degrees, coarse to fine.
  const GRATICULE_STEPS = [30, 10, 5, 2, 1, 0.5, 0.2, 0.1, 0.05, 0.02, 0.01,
                           0.005, 0.002, 0.001, 0.0005, 0.0002, 0.0001];

  const state = {
    token: null,
    config: null,
    profiles: new Map(),      // name -> {color, points, rejected, row}
    reasons: new Map(),       // reason -> count
    drawn: 0,
    rejected: 0,
    droppedByServer: 0,
    markers: [],              // {marker, at, opacity}, oldest first
    bounds: null,
    follow: true,
    map: null,
    pointsLayer: null,
    graticuleLayer: null,
    layersControl: null,
    density: new Map(),       // profile -> {layer, next, inControl}
    countersDirty: false,
  };

  const $ = (id) => document.getElementById(id);

  function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
  }

  function escapeHtml(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({
      '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;',
    })[c]);
  }

  /* ------------------------------------------------------------ token */

  // #token=... never reaches the server (fragments are not sent) and is
  // removed from the address bar at once; the tab keeps it in
  // sessionStorage.
  function readToken() {
    const match = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (match) {
      const token = decodeURIComponent(match[1]);
      try { sessionStorage.setItem(TOKEN_KEY, token); } catch (e) { /* private mode */ }
      history.replaceState(null, '', location.pathname + location.search);
      return token;
    }
    try { return sessionStorage.getItem(TOKEN_KEY); } catch (e) { return null; }
  }

  function authHeaders() {
    return state.token ? { Authorization: 'Bearer ' + state.token } : {};
  }

  function askForToken() {
    return new Promise((resolve) => {
      const form = $('token-form');
      form.hidden = false;
      $('token-input').focus();
      form.addEventListener('submit', function onSubmit(event) {
        event.preventDefault();
        form.removeEventListener('submit', onSubmit);
        state.token = $('token-input').value.trim();
        try { sessionStorage.setItem(TOKEN_KEY, state.token); } catch (e) { /* private mode */ }
        form.hidden = true;
        resolve();
      });
    });
  }

  async function loadConfig() {
    for (;;) {
      let response;
      try {
        response = await fetch('dashboard.json', { headers: authHeaders(), cache: 'no-store' });
      } catch (e) {
        setStatus('closed', 'unreachable');
        await sleep(RECONNECT_MAX_MS);
        continue;
      }
      if (response.status === 401) {
        setStatus('closed', 'token required');
        await askForToken();
        continue;
      }
      if (!response.ok) {
        setStatus('closed', 'HTTP ' + response.status);
        await sleep(RECONNECT_MAX_MS);
        continue;
      }
      return response.json();
    }
  }

  /* ----------------------------------------------------------- status */

  function setStatus(kind, text) {
    const el = $('feed-status');
    el.textContent = text;
    el.className = 'state-' + kind;
    document.body.dataset.feed = kind === 'live' ? 'open' : 'closed';
  }

  function profileEntry(name) {
    let entry = state.profiles.get(name);
    if (entry) return entry;
    entry = {
      color: PALETTE[state.profiles.size % PALETTE.length],
      points: 0,
      rejected: 0,
      row: document.createElement('tr'),
    };
    entry.row.innerHTML = '<td><span class="swatch"></span></td><td></td>' +
                          '<td class="points">0</td><td class="rejected">0</td>';
    entry.row.querySelector('.swatch').style.background = entry.color;
    entry.row.children[1].textContent = name;
    state.profiles.set(name, entry);
    const rows = Array.from(state.profiles.keys()).sort();
    const body = $('profiles');
    rows.forEach((key) => body.appendChild(state.profiles.get(key).row));
    return entry;
  }

  function renderCounters() {
    if (!state.countersDirty) return;
    state.countersDirty = false;
    $('points-drawn').textContent = String(state.drawn);
    $('rejected-total').textContent = String(state.rejected);
    for (const entry of state.profiles.values()) {
      entry.row.querySelector('.points').textContent = String(entry.points);
      entry.row.querySelector('.rejected').textContent = String(entry.rejected);
    }
    const list = $('reasons');
    list.textContent = '';
    const reasons = Array.from(state.reasons.entries()).sort((a, b) => b[1] - a[1]);
    if (reasons.length === 0) {
      list.innerHTML = '<li class="empty">none yet</li>';
    }
    for (const [reason, count] of reasons) {
      const item = document.createElement('li');
      item.textContent = reason + ': ' + count;
      list.appendChild(item);
    }
    if (state.droppedByServer > 0) {
      $('dropped-note').hidden = false;
      $('dropped-events').textContent = String(state.droppedByServer);
    }
  }

  /* --------------------------------------------------------------- map */

  function graticuleStep(bounds) {
    const span = Math.max(bounds.getNorth() - bounds.getSouth(),
                          (bounds.getEast() - bounds.getWest()) / 2);
    for (const step of GRATICULE_STEPS) {
      if (span / step >= 6) return step;
    }
    return GRATICULE_STEPS[GRATICULE_STEPS.length - 1];
  }

  // Lines of equal latitude and longitude over the view, at a step that
  // keeps about 6 to 15 of each in sight: the map's only background when
  // no tile server is configured.
  function drawGraticule() {
    const layer = state.graticuleLayer;
    layer.clearLayers();
    const bounds = state.map.getBounds();
    const step = graticuleStep(bounds);
    const south = Math.max(-85, Math.floor(bounds.getSouth() / step) * step);
    const north = Math.min(85, Math.ceil(bounds.getNorth() / step) * step);
    const west = Math.floor(bounds.getWest() / step) * step;
    const east = Math.ceil(bounds.getEast() / step) * step;
    const style = { color: '#7a8da0', weight: 1, opacity: 0.55, interactive: false,
                    pane: 'graticule' };
    const major = { color: '#4d6072', weight: 1.5, opacity: 0.8, interactive: false,
                    pane: 'graticule' };
    const digits = Math.max(0, Math.ceil(-Math.log10(step)));
    const label = (latlng, text, anchor) => L.marker(latlng, {
      icon: L.divIcon({ className: 'graticule-label', html: text, iconSize: null,
                        iconAnchor: anchor }),
      interactive: false, keyboard: false, pane: 'graticule',
    });
    for (let lat = south; lat <= north + step / 2; lat += step) {
      const value = Number(lat.toFixed(digits + 1));
      layer.addLayer(L.polyline([[value, west], [value, east]],
                                Math.abs(value) < step / 2 ? major : style));
      if (value > bounds.getSouth() && value < bounds.getNorth()) {
        const text = Math.abs(value).toFixed(digits) + '°' + (value < 0 ? 'S' : value > 0 ? 'N' : '');
        layer.addLayer(label([value, bounds.getWest()], text, [-4, 14]));
      }
    }
    for (let lon = west; lon <= east + step / 2; lon += step) {
      const value = Number(lon.toFixed(digits + 1));
      layer.addLayer(L.polyline([[south, value], [north, value]],
                                Math.abs(value) < step / 2 ? major : style));
      if (value > bounds.getWest() && value < bounds.getEast()) {
        const text = Math.abs(value).toFixed(digits) + '°' + (value < 0 ? 'W' : value > 0 ? 'E' : '');
        layer.addLayer(label([bounds.getNorth(), value], text, [-3, -4]));
      }
    }
    $('graticule-step').textContent = 'Graticule every ' + step + '°.';
  }

  function setupMap(config) {
    if (typeof L === 'undefined') {
      $('map-error').hidden = false;
      return;
    }
    const map = L.map('map', { preferCanvas: true, worldCopyJump: true, zoomSnap: 0.5 });
    state.map = map;
    map.setView([20, 0], 2);
    // Below the points (overlayPane, 400), above tiles (200).
    map.createPane('density').style.zIndex = 350;
    map.createPane('graticule').style.zIndex = 380;
    const overlays = {};
    if (config.tile_url) {
      const tiles = L.tileLayer(config.tile_url, {
        attribution: escapeHtml(config.tile_attribution || ''),
        maxZoom: 19,
      });
      tiles.addTo(map);
    }
    state.graticuleLayer = L.layerGroup().addTo(map);
    state.pointsLayer = L.layerGroup().addTo(map);
    overlays.graticule = state.graticuleLayer;
    overlays['sanitized points'] = state.pointsLayer;
    state.layersControl = L.control.layers(null, overlays, { collapsed: false }).addTo(map);
    L.control.scale({ imperial: false }).addTo(map);
    map.attributionControl.setPrefix('Leaflet (libjs-leaflet)');
    map.on('moveend', drawGraticule);
    drawGraticule();
    // A user who moves the map takes over from "follow".
    map.on('dragstart', () => setFollow(false));
    map.getContainer().addEventListener('wheel', () => setFollow(false), { passive: true });
    $('follow').addEventListener('change', (event) => setFollow(event.target.checked));
  }

  function setFollow(on) {
    state.follow = on;
    $('follow').checked = on;
    if (on) followPoints();
  }

  function followPoints() {
    if (!state.follow || !state.map || !state.bounds) return;
    state.map.fitBounds(state.bounds.pad(0.05), { maxZoom: 15, animate: false });
  }

  function addPoint(location) {
    const profile = location.profile || '(none)';
    const entry = profileEntry(profile);
    entry.points++;
    state.countersDirty = true;
    if (!state.map || typeof location.lat !== 'number' || typeof location.lon !== 'number') {
      return;
    }
    const latlng = L.latLng(location.lat, location.lon);
    const marker = L.circleMarker(latlng, {
      radius: 3, weight: 1, color: entry.color, fillColor: entry.color,
      opacity: 1, fillOpacity: 0.75, interactive: false,
    });
    marker.addTo(state.pointsLayer);
    state.markers.push({ marker, at: Date.now(), opacity: 1 });
    if (state.markers.length > MAX_POINTS) {
      state.pointsLayer.removeLayer(state.markers.shift().marker);
    }
    if (state.bounds) state.bounds.extend(latlng);
    else state.bounds = L.latLngBounds(latlng, latlng);
    state.drawn++;
  }

  function fadePoints() {
    const now = Date.now();
    for (const item of state.markers) {
      const opacity = Math.max(FADE_FLOOR, 1 - (now - item.at) / FADE_MS);
      if (item.opacity - opacity >= 0.02) {
        item.opacity = opacity;
        item.marker.setStyle({ opacity: opacity, fillOpacity: 0.75 * opacity });
      }
    }
  }

  function addRejection(rejection) {
    state.rejected++;
    const reason = String(rejection.reason || 'unknown')
      .replace(/^REJECTION_REASON_/, '').toLowerCase();
    state.reasons.set(reason, (state.reasons.get(reason) || 0) + 1);
    if (rejection.profile) profileEntry(rejection.profile).rejected++;
    state.countersDirty = true;
  }

  /* -------------------------------------------------------------- feed */

  function handleEvent(block) {
    let name = 'message';
    const data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') name = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) return;
    let message;
    try {
      message = JSON.parse(data.join('\n'));
    } catch (e) {
      return;
    }
    if (name === 'sanitized') addPoint(message);
    else if (name === 'rejected') addRejection(message);
    else if (name === 'dropped') {
      state.droppedByServer += Number(message.events) || 0;
      state.countersDirty = true;
    }
  }

  // fetch() rather than EventSource: EventSource cannot send the
  // Authorization header.
  async function runFeed() {
    let delay = RECONNECT_FIRST_MS;
    for (;;) {
      setStatus('connecting', 'connecting');
      try {
        const response = await fetch('feed', { headers: authHeaders(), cache: 'no-store' });
        if (response.status === 401) {
          setStatus('closed', 'token required');
          await askForToken();
          continue;
        }
        if (!response.ok || !response.body) {
          throw new Error('HTTP ' + response.status);
        }
        setStatus('live', 'live');
        delay = RECONNECT_FIRST_MS;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let pending = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          pending += decoder.decode(value, { stream: true });
          let start = 0;
          let end;
          while ((end = pending.indexOf('\n\n', start)) >= 0) {
            handleEvent(pending.slice(start, end));
            start = end + 2;
          }
          pending = pending.slice(start);
          renderCounters();
        }
        setStatus('closed', 'closed by the server, reconnecting');
      } catch (e) {
        setStatus('closed', 'disconnected (' + e.message + '), reconnecting');
      }
      await sleep(delay);
      delay = Math.min(delay * 2, RECONNECT_MAX_MS);
    }
  }

  /* ----------------------------------------------------------- density */

  // A heat ramp (viridis) distinct from the points' colours; the square
  // root lifts the sparse cells into view.
  const HEAT = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];

  function heatColor(t) {
    const x = Math.min(1, Math.max(0, t)) * (HEAT.length - 1);
    const i = Math.min(HEAT.length - 2, Math.floor(x));
    const f = x - i;
    const c = HEAT[i].map((v, k) => Math.round(v + f * (HEAT[i + 1][k] - v)));
    return 'rgb(' + c.join(',') + ')';
  }

  function densityStyle(maximum) {
    return (feature) => {
      const t = maximum > 0 ? Math.sqrt(feature.properties.probability / maximum) : 0;
      return { stroke: false, fillColor: heatColor(t), fillOpacity: 0.25 + 0.5 * t };
    };
  }

  async function pollDensity(profile) {
    let entry = state.density.get(profile);
    if (!entry) {
      entry = { layer: L.layerGroup(), next: 0, inControl: false };
      state.density.set(profile, entry);
    }
    if (Date.now() < entry.next) return;
    entry.next = Date.now() + DENSITY_EVERY_MS;
    let response;
    try {
      response = await fetch('density/' + encodeURIComponent(profile),
                             { headers: authHeaders(), cache: 'no-store' });
    } catch (e) {
      return;
    }
    if (response.status === 404) {
      // This profile keeps no estimate: no layer.
      entry.next = Date.now() + DENSITY_ABSENT_EVERY_MS;
      return;
    }
    if (!response.ok) return; // 503: none yet
    let geojson;
    try {
      geojson = await response.json();
    } catch (e) {
      return;
    }
    const cells = (geojson.features || []).filter((f) => f.properties);
    const maximum = cells.reduce((m, f) => Math.max(m, f.properties.probability || 0), 0);
    // Cells below a thousandth of the peak would only tint the map.
    const features = cells.filter((f) => f.properties.probability > maximum / 1000);
    entry.layer.clearLayers();
    entry.layer.addLayer(L.geoJSON({ type: 'FeatureCollection', features },
                                   { style: densityStyle(maximum), interactive: false,
                                     pane: 'density' }));
    entry.cycle = geojson.cycle;
    renderDensityList();
    if (!entry.inControl) {
      entry.inControl = true;
      entry.layer.addTo(state.map);
      state.layersControl.addOverlay(entry.layer, 'density: ' + escapeHtml(profile));
    }
  }

  function renderDensityList() {
    const shown = Array.from(state.density.entries())
      .filter(([, entry]) => entry.cycle !== undefined)
      .map(([name, entry]) => name + ' (cycle ' + entry.cycle + ')');
    $('density-layers').textContent = shown.length > 0 ? shown.join(', ') : 'none';
    document.body.dataset.densityLayers = String(shown.length);
  }

  function pollDensities() {
    if (!state.map) return;
    const names = new Set(state.config.profiles || []);
    for (const name of state.profiles.keys()) names.add(name);
    for (const name of names) pollDensity(name);
  }

  /* ------------------------------------------------------------- start */

  async function start() {
    $('fade-minutes').textContent = String(FADE_MS / 60000);
    $('max-points').textContent = String(MAX_POINTS);
    state.token = readToken();
    state.config = await loadConfig();
    setupMap(state.config);
    (state.config.profiles || []).forEach(profileEntry);
    state.countersDirty = true;
    renderCounters();
    setInterval(fadePoints, FADE_EVERY_MS);
    setInterval(followPoints, FOLLOW_EVERY_MS);
    setInterval(renderCounters, 500);
    setInterval(pollDensities, 2000);
    pollDensities();
    if (state.config.feed) runFeed();
    else setStatus('closed', 'off (http.feed_max_streams = 0)');
  }

  start();
}());
