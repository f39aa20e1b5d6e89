// TritonForge dashboard: plain JS, no dependencies. Pages are routed by the URL hash
// (#/runs, #/curves?runs=a,b, #/evaluations?..., #/evaluation/KEY, #/episodes?...,
// #/episode/ID, #/suite, #/queue). Charts are SVG drawn here. Every page sets
// <body data-page=NAME data-ready=1> once rendered (the browser test waits for it).
'use strict';

const $ = (sel, el = document) => el.querySelector(sel);
const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
const main = () => $('#main');
let cleanup = [];   // closers of the current page (live streams)

async function api(path) {
  const r = await fetch(path, { credentials: 'same-origin', headers: { accept: 'application/json' } });
  if (r.status === 401) { location.href = '/dash/login'; throw new Error('log in first'); }
  let body;
  try { body = await r.json(); } catch (e) { throw new Error(`${path}: ${r.status} ${r.statusText}`); }
  if (!r.ok) throw new Error(body.detail || `${path}: ${r.status}`);
  return body;
}

// ---------- formatting ----------
const fmtTime = (t) => (t == null ? '' : new Date(t * 1000).toISOString().slice(0, 19).replace('T', ' '));
function fmtNum(x, digits = 3) {
  if (x == null || Number.isNaN(x)) return '—';
  if (typeof x !== 'number') return esc(x);
  const a = Math.abs(x);
  if (a === 0) return '0';
  if (a >= 1e5 || a < 1e-3) return x.toExponential(2);
  if (Number.isInteger(x)) return String(x);
  return x.toPrecision(digits).replace(/(\.\d*?)0+$/, '$1').replace(/\.$/, '');
}
const pct = (x) => (x == null ? '—' : `${(x * 100).toFixed(1)}%`);
const pill = (s) => `<span class="pill s-${esc(s)}">${esc(s ?? '—')}</span>`;
const speed = (x) => (x == null ? '—' : `${fmtNum(x)}×`);
const qs = (o) => Object.entries(o).filter(([, v]) => v != null && v !== '').map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&');

function kv(obj, keys) {
  const rows = (keys || Object.keys(obj || {})).filter((k) => obj && obj[k] != null && obj[k] !== '')
    .map((k) => `<dt>${esc(k)}</dt><dd>${typeof obj[k] === 'object' ? `<code>${esc(JSON.stringify(obj[k]))}</code>` : esc(obj[k])}</dd>`);
  return rows.length ? `<dl class="kv">${rows.join('')}</dl>` : '<p class="muted">none</p>';
}

function download(name, blob) {
  const a = document.createElement('a');
  a.href = URL.createObjectURL(blob);
  a.download = name;
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

// ---------- Python highlighter ----------
const PY_KEYWORDS = new Set('False None True and as assert async await break class continue def del elif else except finally for from global if import in is lambda nonlocal not or pass raise return try while with yield match case'.split(' '));
const PY_BUILTINS = new Set('self super len range int float str bool list dict tuple set print min max abs sum zip enumerate isinstance getattr setattr hasattr type object'.split(' '));
const PY_TOKEN = /(#[^\n]*)|((?:[rRbBfFuU]{1,2})?(?:"""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'))|(@[\w.]+)|\b(0[xX][0-9a-fA-F]+|\d+\.?\d*(?:[eE][+-]?\d+)?)\b|([A-Za-z_]\w*)/g;

/** Highlighted HTML of Python source, one span per token and line, with line numbers. */
function highlight(src) {
  if (src == null) return '<p class="muted">not stored</p>';
  const out = [];
  let last = 0;
  let prev = '';
  const span = (cls, text) => text.split('\n').map((p) => (p ? `<span class="${cls}">${esc(p)}</span>` : '')).join('\n');
  for (const m of src.matchAll(PY_TOKEN)) {
    out.push(esc(src.slice(last, m.index)));
    const [t, com, str, dec, num, id] = m;
    if (com) out.push(span('com', t));
    else if (str) out.push(span('str', t));
    else if (dec) out.push(span('dec', t));
    else if (num) out.push(span('num-lit', t));
    else if (id && PY_KEYWORDS.has(id)) out.push(span('k', t));
    else if (id && (prev === 'def' || prev === 'class')) out.push(span('fn', t));
    else if (id && PY_BUILTINS.has(id)) out.push(span('bi', t));
    else out.push(esc(t));
    if (id) prev = id;
    last = m.index + t.length;
  }
  out.push(esc(src.slice(last)));
  const lines = out.join('').split('\n');
  return `<pre class="code">${lines.map((l, i) => `<span class="ln">${i + 1}</span>${l}`).join('\n')}</pre>`;
}

// ---------- charts ----------
const COLORS = ['#1f5fbf', '#d9480f', '#2b8a3e', '#862e9c', '#c2255c', '#0b7285', '#e67700', '#5f3dc4', '#495057', '#a61e4d'];

function niceTicks(lo, hi, n = 5) {
  if (!(hi > lo)) { const d = Math.abs(lo) || 1; lo -= d / 2; hi += d / 2; }
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((s) => s * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(+v.toPrecision(12));
  return ticks;
}

/** Exponential moving average with bias correction (as TensorBoard smooths). */
function smooth(points, a) {
  if (!a) return points;
  let s = 0; let w = 0;
  return points.map(([x, y]) => { s = a * s + (1 - a) * y; w = a * w + (1 - a); return [x, s / w]; });
}

/** An SVG line chart of `series` ({name, color, points: [[x, y]]}). */
function lineChart(series, { log = false, smoothing = 0, xLabel = 'step' } = {}) {
  const W = 520; const H = 240; const L = 58; const R = 12; const T = 10; const B = 34;
  const usable = series.map((s) => ({ ...s, points: s.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y) && (!log || y > 0)) }))
    .filter((s) => s.points.length);
  const head = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" font-family="system-ui, sans-serif" font-size="12"><rect width="${W}" height="${H}" fill="#fff"/>`;
  if (!usable.length) return `${head}<text x="${W / 2}" y="${H / 2}" text-anchor="middle" fill="#6b7685">no data${log ? ' (log scale needs values > 0)' : ''}</text></svg>`;
  const xs = usable.flatMap((s) => s.points.map((p) => p[0]));
  const ys = usable.flatMap((s) => s.points.map((p) => p[1]));
  let x0 = Math.min(...xs); let x1 = Math.max(...xs);
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  const f = log ? Math.log10 : (v) => v;
  let y0 = f(Math.min(...ys)); let y1 = f(Math.max(...ys));
  if (y0 === y1) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const pad = (y1 - y0) * 0.05; y0 -= pad; y1 += pad;
  const X = (v) => L + ((v - x0) / (x1 - x0)) * (W - L - R);
  const Y = (v) => T + (1 - (f(v) - y0) / (y1 - y0)) * (H - T - B);
  const parts = [head];
  const yt = log
    ? Array.from({ length: Math.floor(y1) - Math.ceil(y0) + 1 }, (_, i) => 10 ** (Math.ceil(y0) + i))
    : niceTicks(y0, y1);
  for (const v of (yt.length ? yt : [10 ** y0])) {
    const y = Y(v);
    parts.push(`<line x1="${L}" x2="${W - R}" y1="${y}" y2="${y}" stroke="#eef0f3"/><text x="${L - 6}" y="${y + 4}" text-anchor="end" fill="#6b7685">${fmtNum(v)}</text>`);
  }
  for (const v of niceTicks(x0, x1, 6)) {
    const x = X(v);
    if (x < L - 0.5 || x > W - R + 0.5) continue;
    parts.push(`<line x1="${x}" x2="${x}" y1="${T}" y2="${H - B}" stroke="#f3f4f6"/><text x="${x}" y="${H - B + 15}" text-anchor="middle" fill="#6b7685">${fmtNum(v)}</text>`);
  }
  parts.push(`<line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}" stroke="#aab2bd"/><line x1="${L}" x2="${L}" y1="${T}" y2="${H - B}" stroke="#aab2bd"/>`);
  parts.push(`<text x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle" fill="#6b7685">${esc(xLabel)}${log ? ' · log scale' : ''}</text>`);
  for (const s of usable) {
    const path = (pts) => pts.map(([x, y], i) => `${i ? 'L' : 'M'}${X(x).toFixed(1)},${Y(y).toFixed(1)}`).join('');
    if (smoothing > 0) parts.push(`<path d="${path(s.points)}" fill="none" stroke="${s.color}" stroke-opacity="0.25" stroke-width="1"/>`);
    parts.push(`<path d="${path(smooth(s.points, smoothing))}" fill="none" stroke="${s.color}" stroke-width="1.8" stroke-dasharray="${s.dash || ''}"><title>${esc(s.name)}</title></path>`);
    if (s.points.length === 1) { const [x, y] = s.points[0]; parts.push(`<circle cx="${X(x)}" cy="${Y(y)}" r="3" fill="${s.color}"/>`); }
  }
  parts.push('</svg>');
  return parts.join('');
}

/** A PNG of an SVG chart, drawn on a canvas at twice its size. */
function svgToPngBlob(svgText) {
  return new Promise((resolve, reject) => {
    const img = new Image();
    const url = URL.createObjectURL(new Blob([svgText], { type: 'image/svg+xml' }));
    img.onload = () => {
      const c = document.createElement('canvas');
      c.width = img.width * 2; c.height = img.height * 2;
      const g = c.getContext('2d');
      g.scale(2, 2);
      g.drawImage(img, 0, 0);
      URL.revokeObjectURL(url);
      c.toBlob((b) => (b ? resolve(b) : reject(new Error('the canvas gave no PNG'))), 'image/png');
    };
    img.onerror = () => reject(new Error('the chart could not be drawn'));
    img.src = url;
  });
}

/** The exports of the charts on screen, also reachable from tests (window.tfExport). */
const exporter = { rendered: [] };
function csvOf(which) {
  const lines = ['chart,series,step,value'];
  for (const { c, series } of which) for (const s of series) for (const [x, y] of s.points) lines.push(`${c.id},"${s.name.replace(/"/g, '""')}",${x},${y}`);
  return `${lines.join('\n')}\n`;
}
window.tfExport = {
  csv: (id) => csvOf(exporter.rendered.filter((r) => id == null || r.c.id === id)),
  png: (id) => svgToPngBlob(document.querySelector(`[data-chart="${id}"] > svg`).outerHTML),
};

// ---------- pages ----------
function setNav(page) {
  document.querySelectorAll('header nav a').forEach((a) => a.classList.toggle('on', a.dataset.page === page));
}

function ready(page) {
  document.body.dataset.page = page;
  document.body.dataset.ready = '1';
}

function headline(r) {
  const h = r.headline || {};
  const bits = [];
  if (r.kind === 'sft' && h.train) {
    bits.push(`loss <b>${fmtNum(h.train.loss)}</b>`);
    if (h.validation) bits.push(`val loss <b>${fmtNum(h.validation.loss)}</b>`);
    bits.push(`lr ${fmtNum(h.train.lr)}`, `${fmtNum(h.train.tokens_per_s)} tok/s`);
    if (h.train.mfu != null) bits.push(`MFU ${pct(h.train.mfu)}`);
    bits.push(`step ${h.train.step}`);
  }
  if (r.kind === 'rl' && h.rl) {
    const pbt = h.rl.pass_by_turn || [];
    bits.push(`reward <b>${fmtNum(h.rl.reward_mean)}</b>`, `solved by last turn <b>${pct(pbt[pbt.length - 1])}</b>`);
    if (h.rl.kl != null) bits.push(`KL ${fmtNum(h.rl.kl)}`);
    bits.push(`step ${h.rl.step}`);
  }
  for (const x of (r.kind === 'rl' && h.heldout) || []) bits.push(`heldout ${esc(x.set)} pass@1 <b>${pct(x.pass_at_1)}</b> (step ${x.step})`);
  if (h.episodes && h.episodes.episodes) {
    bits.push(`<b>${h.episodes.solved}/${h.episodes.episodes}</b> episodes solved`);
    if (h.episodes.mean_return != null) bits.push(`mean return ${fmtNum(h.episodes.mean_return)}`);
  }
  if (h.by_status) bits.push(Object.entries(h.by_status).map(([s, n]) => `${pill(s)} ${n}`).join(' '));
  return bits.join(' · ') || '<span class="muted">—</span>';
}

function settingsText(s) {
  if (!s || typeof s !== 'object') return '';
  const flat = [];
  const walk = (o, p) => {
    for (const [k, v] of Object.entries(o)) {
      if (v && typeof v === 'object' && !Array.isArray(v)) walk(v, `${p}${k}.`);
      else flat.push(`${p}${k}=${Array.isArray(v) ? v.join(',') : v}`);
    }
  };
  walk(s, '');
  return flat.join(' ');
}

async function pageRuns(p) {
  const { runs } = await api(`/dash/runs?${qs({ kind: p.kind })}`);
  const rows = runs.map((r) => {
    const links = [];
    if (r.metrics) links.push(`<a href="#/curves?${qs({ runs: r.id })}">curves</a>`);
    if (r.episodes) links.push(`<a href="#/episodes?${qs({ run: r.id })}">episodes</a>`);
    if (r.evaluations) links.push(`<a href="#/evaluations?${qs({ run: r.id })}">evaluations</a>`);
    const st = settingsText(r.settings);
    return `<tr><td><b>${esc(r.id)}</b><div class="muted" title="${esc(st)}">${esc(st.length > 140 ? `${st.slice(0, 140)}…` : st)}</div></td>
      <td>${esc(r.kind)}</td><td>${pill(r.status)}</td><td>${fmtTime(r.started_at)}</td><td>${fmtTime(r.updated_at)}</td>
      <td>${headline(r)}</td><td class="num">${r.evaluations || ''}</td><td class="num">${r.episodes || ''}</td><td class="num">${r.metrics || ''}</td><td>${links.join(' ')}</td></tr>`;
  });
  const kinds = ['', 'eval', 'agent', 'sft', 'rl'].map((k) => `<option value="${k}" ${p.kind === k ? 'selected' : ''}>${k || 'all kinds'}</option>`).join('');
  main().innerHTML = `<h1>Runs</h1>
    <div class="filters"><label>Kind <select id="kind">${kinds}</select></label><span class="muted">${runs.length} run(s)</span></div>
    <table id="runs"><thead><tr><th>Run</th><th>Kind</th><th>Status</th><th>Started (UTC)</th><th>Last activity</th><th>Headline</th>
    <th class="num">Evals</th><th class="num">Episodes</th><th class="num">Metrics</th><th></th></tr></thead>
    <tbody>${rows.join('') || '<tr><td colspan="10" class="muted">No runs in this store yet.</td></tr>'}</tbody></table>`;
  $('#kind').onchange = (e) => { location.hash = `#/runs?${qs({ kind: e.target.value })}`; };
  ready('runs');
}

// Chart definitions: which numbers of a metric row each chart draws.
const SFT_CHARTS = [
  { id: 'loss', title: 'Loss', series: [['train', 'train', (m) => m.loss], ['validation', 'validation', (m) => m.loss]] },
  { id: 'lr', title: 'Learning rate', series: [['lr', 'train', (m) => m.lr]] },
  { id: 'grad_norm', title: 'Gradient norm', series: [['grad norm', 'train', (m) => m.grad_norm]] },
  { id: 'tokens_per_s', title: 'Tokens/s', series: [['tokens/s', 'train', (m) => m.tokens_per_s]] },
  { id: 'mfu', title: 'MFU', series: [['MFU', 'train', (m) => m.mfu], ['MFU (6ND)', 'train', (m) => m.mfu_standard]] },
];
const RL_CHARTS = [
  { id: 'reward', title: 'Reward', series: [['reward mean', 'rl', (m) => m.reward_mean], ['first-turn return', 'rl', (m) => m.return_mean]] },
  { id: 'pass_by_turn', title: 'Solved by turn', passByTurn: true },
  // Heldout sets are measured every few steps (split `heldout:<set>`): one series per set.
  { id: 'heldout_pass', title: 'Heldout pass@1 (first turn)', heldout: (m) => m.pass_at_1 },
  { id: 'heldout_solved', title: 'Heldout solved (by the last turn)', heldout: (m) => m.solved },
  { id: 'heldout_compile', title: 'Heldout compile rate', heldout: (m) => m.compile_rate },
  { id: 'kl', title: 'KL', series: [['KL', 'rl', (m) => m.kl]] },
  { id: 'entropy', title: 'Entropy', series: [['entropy', 'rl', (m) => m.entropy]] },
  { id: 'clip_fraction', title: 'Clip fraction', series: [['clip fraction', 'rl', (m) => m.clip_fraction]] },
  { id: 'rl_loss', title: 'Loss', series: [['loss', 'rl', (m) => m.loss], ['policy loss', 'rl', (m) => m.policy_loss]] },
  { id: 'rl_grad_norm', title: 'Gradient norm', series: [['grad norm', 'rl', (m) => m.grad_norm]] },
  { id: 'rl_lr', title: 'Learning rate', series: [['lr', 'rl', (m) => m.lr]] },
  { id: 'time_split', title: 'Time split (s per step)', series: [['generate', 'rl', (m) => m.generate_s], ['evaluate', 'rl', (m) => m.evaluate_s], ['score', 'rl', (m) => m.score_s], ['train', 'rl', (m) => m.train_s], ['whole step', 'rl', (m) => m.step_s]] },
  { id: 'rl_tokens_per_s', title: 'Tokens/s (generation)', series: [['tokens/s', 'rl', (m) => m.tokens_per_s]] },
];
const DASHES = ['', '5 3', '2 2', '8 3 2 3', '1 3'];

async function pageCurves(p) {
  const { runs } = await api('/dash/runs');
  const withMetrics = runs.filter((r) => r.metrics > 0);
  const chosen = (p.runs || (withMetrics[0] ? withMetrics[0].id : '')).split(',').filter(Boolean);
  const smoothing = Math.min(0.99, Math.max(0, parseFloat(p.smooth || '0') || 0));
  const log = p.log === '1';
  const picker = withMetrics.map((r) => `<label><input type="checkbox" value="${esc(r.id)}" ${chosen.includes(r.id) ? 'checked' : ''}> ${esc(r.id)} <span class="muted">(${r.kind}, ${r.metrics})</span></label>`).join('');
  main().innerHTML = `<h1>Curves</h1>
    <div class="panel"><div class="runpick" id="pick">${picker || '<span class="muted">No run has metrics yet.</span>'}</div>
    <div class="controls"><label>Smoothing <input id="smooth" type="range" min="0" max="0.99" step="0.01" value="${smoothing}"> <span id="smoothv">${smoothing}</span></label>
    <label><input id="log" type="checkbox" ${log ? 'checked' : ''}> log scale</label>
    <button id="csv">Export CSV</button><span id="live" class="live"></span></div></div>
    <div id="charts" class="charts"></div>`;
  const go = (patch) => { location.hash = `#/curves?${qs({ runs: chosen.join(','), smooth: smoothing || '', log: log ? '1' : '', ...patch })}`; };
  $('#pick').onchange = () => go({ runs: [...document.querySelectorAll('#pick input:checked')].map((i) => i.value).join(',') });
  $('#smooth').oninput = (e) => { $('#smoothv').textContent = e.target.value; };
  $('#smooth').onchange = (e) => go({ smooth: e.target.value === '0' ? '' : e.target.value });
  $('#log').onchange = (e) => go({ log: e.target.checked ? '1' : '' });
  const data = new Map(chosen.map((id) => [id, new Map()]));   // run -> "step/split" -> row
  const kinds = new Map(runs.map((r) => [r.id, r.kind]));
  const color = new Map(chosen.map((id, i) => [id, COLORS[i % COLORS.length]]));
  let rendered = null;

  function seriesFor(chart) {
    const out = [];
    for (const run of chosen) {
      const rows = [...(data.get(run) || new Map()).values()].sort((a, b) => a.step - b.step);
      const prefix = chosen.length > 1 ? `${run} · ` : '';
      if (chart.passByTurn) {
        const n = Math.max(0, ...rows.filter((r) => r.split === 'rl').map((r) => (r.m.pass_by_turn || []).length));
        for (let t = 0; t < n; t++) {
          out.push({ name: `${prefix}turn ${t + 1}`, color: chosen.length > 1 ? color.get(run) : COLORS[t % COLORS.length], dash: chosen.length > 1 ? DASHES[t % DASHES.length] : '',
            points: rows.filter((r) => r.split === 'rl').map((r) => [r.step, (r.m.pass_by_turn || [])[t]]).filter((q) => q[1] != null) });
        }
        continue;
      }
      if (chart.heldout) {
        const sets = [...new Set(rows.map((r) => r.split).filter((sp) => sp.startsWith('heldout:')))].sort();
        sets.forEach((sp, i) => {
          const points = rows.filter((r) => r.split === sp).map((r) => [r.step, chart.heldout(r.m)]).filter((q) => q[1] != null);
          if (points.length) {
            out.push({ name: `${prefix}${sp.slice('heldout:'.length)}`, points,
              color: chosen.length > 1 ? color.get(run) : COLORS[i % COLORS.length],
              dash: chosen.length > 1 ? DASHES[i % DASHES.length] : '' });
          }
        });
        continue;
      }
      chart.series.forEach(([name, split, get], i) => {
        const points = rows.filter((r) => r.split === split).map((r) => [r.step, get(r.m)]).filter((q) => q[1] != null);
        if (points.length) {
          out.push({ name: `${prefix}${name}`, points,
            color: chosen.length > 1 ? color.get(run) : COLORS[i % COLORS.length],
            dash: chosen.length > 1 ? DASHES[i % DASHES.length] : '' });
        }
      });
    }
    return out;
  }

  function render() {
    const anyKind = (k) => chosen.some((id) => kinds.get(id) === k);
    const charts = [...(anyKind('sft') ? [{ section: 'Supervised fine-tuning' }, ...SFT_CHARTS] : []),
      ...(anyKind('rl') ? [{ section: 'Reinforcement learning' }, ...RL_CHARTS] : [])];
    const el = $('#charts');
    if (!el) return;
    rendered = charts.filter((c) => !c.section).map((c) => ({ c, series: seriesFor(c) }));
    el.innerHTML = charts.map((c) => (c.section ? { c } : rendered.find((r) => r.c === c))).map(({ c, series }) => (c.section ? `<h2 class="section">${esc(c.section)}</h2>` : `<div class="panel chart" data-chart="${c.id}"><h3>${esc(c.title)}<span class="tools"><button data-png="${c.id}">PNG</button><button data-csv="${c.id}">CSV</button></span></h3>
      ${lineChart(series, { log, smoothing })}
      <div class="legend">${series.map((s) => `<span><svg width="20" height="8"><line x1="0" x2="20" y1="4" y2="4" stroke="${s.color}" stroke-width="2" stroke-dasharray="${s.dash || ''}"/></svg> ${esc(s.name)} <b>${fmtNum(s.points[s.points.length - 1][1])}</b></span>`).join('')}</div></div>`)).join('')
      || '<p class="muted">Pick a run with metrics.</p>';
    exporter.rendered = rendered;
    el.querySelectorAll('button[data-png]').forEach((b) => {
      b.onclick = () => window.tfExport.png(b.dataset.png).then((blob) => download(`${b.dataset.png}.png`, blob), (e) => alert(e.message));
    });
    el.querySelectorAll('button[data-csv]').forEach((b) => {
      b.onclick = () => download(`${b.dataset.csv}.csv`, new Blob([window.tfExport.csv(b.dataset.csv)], { type: 'text/csv' }));
    });
  }
  $('#csv').onclick = () => download('curves.csv', new Blob([window.tfExport.csv()], { type: 'text/csv' }));

  if (!chosen.length) { render(); ready('curves'); return; }
  // One stream for every chosen run: all stored metrics first, then new ones live.
  let pending = new Set(chosen);
  let timer = null;
  await new Promise((resolve) => {
    const es = new EventSource(`/dash/stream?${qs({ runs: chosen.join(',') })}`);
    cleanup.push(() => es.close());
    es.addEventListener('metrics', (ev) => {
      const { run, rows } = JSON.parse(ev.data);
      const m = data.get(run);
      for (const r of rows) m.set(`${r.step}/${r.split}`, r);
      pending.delete(run);
      if (!pending.size) {
        $('#live') && ($('#live').textContent = `● live · updated ${new Date().toISOString().slice(11, 19)} UTC`);
        if (!timer) timer = setTimeout(() => { timer = null; render(); resolve(); }, rendered ? 500 : 0);
      }
    });
    es.addEventListener('error', () => { if ($('#live')) $('#live').textContent = 'stream interrupted; retrying…'; });
  });
  ready('curves');
}

function dtToSecs(v) { return v ? Math.floor(new Date(`${v}Z`).getTime() / 1000) : ''; }
function secsToDt(s) { return s ? new Date(s * 1000).toISOString().slice(0, 16) : ''; }

async function pageEvaluations(p) {
  const [info, runs, page] = await Promise.all([
    api('/dash/info'), api('/dash/runs'),
    api(`/dash/evaluations?${qs({ problem: p.problem, status: p.status, run: p.run, since: p.since, until: p.until, before: p.before, limit: p.limit })}`),
  ]);
  const opt = (v, label, cur) => `<option value="${esc(v)}" ${cur === v ? 'selected' : ''}>${esc(label)}</option>`;
  const statuses = ['', ...info.statuses].map((s) => opt(s, s || 'any status', p.status || '')).join('');
  const runOpts = ['', ...runs.runs.filter((r) => r.evaluations > 0).map((r) => r.id)].map((r) => opt(r, r || 'any run', p.run || '')).join('');
  const rows = page.items.map((e) => `<tr class="click" data-key="${esc(e.key)}"><td>${fmtTime(e.created_at)}</td><td>${esc(e.problem)}</td><td>${esc(e.candidate)}</td>
    <td>${pill(e.status)}</td><td>${esc(e.stage)}</td><td class="num">${speed(e.speedup)}</td><td class="muted">${esc((e.message || '').slice(0, 140))}</td></tr>`).join('');
  main().innerHTML = `<h1>Evaluations <span class="muted">(${info.evaluations} in the store)</span></h1>
    <form class="filters" id="f">
      <label>Problem <input name="problem" value="${esc(p.problem || '')}" placeholder="name"></label>
      <label>Status <select name="status">${statuses}</select></label>
      <label>Run <select name="run">${runOpts}</select></label>
      <label>Since (UTC) <input type="datetime-local" name="since" value="${secsToDt(p.since)}"></label>
      <label>Until (UTC) <input type="datetime-local" name="until" value="${secsToDt(p.until)}"></label>
      <button type="submit">Filter</button> <a href="#/evaluations">clear</a></form>
    <table id="evals"><thead><tr><th>Time (UTC)</th><th>Problem</th><th>Candidate</th><th>Status</th><th>Stage</th><th class="num">Speedup</th><th>Message</th></tr></thead>
    <tbody>${rows || '<tr><td colspan="7" class="muted">No evaluation matches.</td></tr>'}</tbody></table>
    <div class="pager">${p.before ? `<a href="#/evaluations?${qs({ ...p, before: '' })}">« newest</a>` : ''}
      ${page.next ? `<a id="older" href="#/evaluations?${qs({ ...p, before: page.next })}">older »</a>` : '<span class="muted">end of results</span>'}</div>`;
  $('#f').onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    location.hash = `#/evaluations?${qs({ problem: f.get('problem'), status: f.get('status'), run: f.get('run'), since: dtToSecs(f.get('since')), until: dtToSecs(f.get('until')) })}`;
  };
  document.querySelectorAll('#evals tr.click').forEach((tr) => { tr.onclick = () => { location.hash = `#/evaluation/${encodeURIComponent(tr.dataset.key)}`; }; });
  ready('evaluations');
}

/** A box plot of reference and candidate timing (median, IQR, min–max). */
function timingChart(t) {
  const rows = [['reference', t.reference], ['candidate', t.candidate]];
  if (t.compiled) rows.push(['torch.compile', t.compiled]);
  const vals = rows.flatMap(([, s]) => [s.min_ms, s.max_ms, s.median_ms - s.iqr_ms, s.median_ms + s.iqr_ms].filter((v) => v != null));
  const lo = Math.max(0, Math.min(...vals)); const hi = Math.max(...vals);
  const W = 560; const L = 100; const R = 20; const rowH = 34; const H = rows.length * rowH + 30;
  const X = (v) => L + ((v - lo) / ((hi - lo) || 1)) * (W - L - R);
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}"><rect width="${W}" height="${H}" fill="#fff"/>`];
  rows.forEach(([name, s], i) => {
    const y = 12 + i * rowH; const c = COLORS[i];
    const q1 = s.median_ms - s.iqr_ms / 2; const q3 = s.median_ms + s.iqr_ms / 2;
    parts.push(`<text x="${L - 8}" y="${y + 13}" text-anchor="end">${name}</text>`);
    if (s.min_ms != null && s.max_ms != null) parts.push(`<line x1="${X(s.min_ms)}" x2="${X(s.max_ms)}" y1="${y + 9}" y2="${y + 9}" stroke="${c}"/>`);
    parts.push(`<rect x="${X(q1)}" y="${y}" width="${Math.max(1, X(q3) - X(q1))}" height="18" fill="${c}" fill-opacity="0.2" stroke="${c}"/><line x1="${X(s.median_ms)}" x2="${X(s.median_ms)}" y1="${y}" y2="${y + 18}" stroke="${c}" stroke-width="2.5"/>`);
  });
  for (const v of niceTicks(lo, hi, 5)) parts.push(`<text x="${X(v)}" y="${H - 6}" text-anchor="middle">${fmtNum(v)} ms</text>`);
  parts.push('</svg>');
  return parts.join('');
}

function table(objs, cols) {
  if (!objs || !objs.length) return '<p class="muted">none</p>';
  cols = cols || [...new Set(objs.flatMap((o) => Object.keys(o)))];
  return `<table><thead><tr>${cols.map((c) => `<th>${esc(c)}</th>`).join('')}</tr></thead><tbody>${objs.map((o) => `<tr>${cols.map((c) => {
    const v = o[c];
    return `<td>${typeof v === 'number' ? fmtNum(v) : typeof v === 'object' && v != null ? esc(JSON.stringify(v)) : esc(v)}</td>`;
  }).join('')}</tr>`).join('')}</tbody></table>`;
}

async function pageEvaluation(key) {
  const d = await api(`/dash/evaluations/${encodeURIComponent(key)}`);
  const r = d.record; const v = r; const t = v.timing;
  const prov = v.provenance;
  main().innerHTML = `<h1>${pill(v.status)} ${esc(r.problem.name)} <span class="muted">← ${esc(r.candidate.name)}</span></h1>
    <p class="muted">key <code>${esc(r.key)}</code> · ${fmtTime(r.created_at)} UTC · runs: ${d.runs.map((x) => `<a href="#/evaluations?${qs({ run: x })}">${esc(x)}</a>`).join(', ') || 'none recorded'}</p>
    <div class="grid2">
      <div class="panel"><h2>Verdict</h2>${kv({ status: v.status, stage: v.stage, message: v.message, timing_note: v.timing_note, tolerance: v.tolerance })}
        ${v.error ? `<h3>Error</h3><pre class="code wrap">${esc(`${v.error.exc_type}: ${v.error.message}`)}</pre>` : ''}
        ${v.mismatch ? `<h3>Mismatch</h3>${kv(v.mismatch)}` : ''}
        ${r.stderr_tail ? `<h3>stderr</h3><pre class="code wrap">${esc(r.stderr_tail)}</pre>` : ''}</div>
      <div class="panel"><h2>Timing</h2>${t ? `<p>speedup <b>${speed(t.speedup)}</b> (95% interval ${fmtNum(t.speedup_low)}–${fmtNum(t.speedup_high)}) ${(t.flags || []).map(pill).join(' ')}</p>${timingChart(t)}
        ${table(['reference', 'candidate', 'compiled'].filter((k) => t[k]).map((k) => ({ '': k, ...t[k] })))}` : `<p class="muted">not timed${v.timing_note ? `: ${esc(v.timing_note)}` : ''}</p>`}
        <h3>Where the time went</h3>${kv({ wall_ms: r.wall_ms, executor_ms: r.executor_ms, lease_wait_ms: r.lease_wait_ms, ...(v.phases || {}) })}</div>
    </div>
    <div class="grid2">
      <div class="panel"><h2>Trials</h2>${table(v.trials, ['trial', 'seed', 'outputs', 'max_abs_err', 'max_rel_err', 'passed'])}</div>
      <div class="panel"><h2>Guard findings</h2>${table(r.guard, ['severity', 'rule', 'line', 'column', 'message'])}</div>
    </div>
    <div class="grid2">
      <div class="panel"><h2>Provenance</h2>${prov ? `${kv({ calls: prov.calls, calls_without_launch: prov.calls_without_launch, gpu_share: prov.gpu_share, window_share: prov.window_share })}<h3>Kernels</h3>${table(prov.kernels)}` : '<p class="muted">the candidate never ran</p>'}</div>
      <div class="panel"><h2>Configuration and environment</h2>${kv(r.config)}<h3>Environment</h3>${kv(r.environment, ['device', 'torch', 'triton', 'python', 'cuda', 'driver', 'interpret', 'platform'])}</div>
    </div>
    <div class="grid2">
      <div class="panel"><h2>Problem <span class="muted">${esc(r.problem.path)}${d.problem_source_from === 'suite' ? ' (from the suite)' : ''}</span></h2>${highlight(d.problem_source)}</div>
      <div class="panel"><h2>Candidate <span class="muted">${esc(r.candidate.path)}</span></h2>${highlight(d.candidate_source)}</div>
    </div>`;
  ready('evaluation');
}

async function pageEpisodes(p) {
  const [runs, page] = await Promise.all([api('/dash/runs'), api(`/dash/episodes?${qs({ run: p.run, problem: p.problem, before: p.before })}`)]);
  const runOpts = ['', ...runs.runs.filter((r) => r.episodes > 0).map((r) => r.id)].map((r) => `<option value="${esc(r)}" ${(p.run || '') === r ? 'selected' : ''}>${esc(r || 'any run')}</option>`).join('');
  const rows = page.items.map((e) => `<tr class="click" data-id="${esc(e.id)}"><td>${fmtTime(e.created_at)}</td><td>${esc(e.run)}</td><td>${esc(e.problem)}</td><td class="num">${e.sample}</td>
    <td class="num">${e.turns}</td><td>${pill(e.outcome)}</td><td class="num">${fmtNum(e.return)}</td><td class="num">${speed(e.best_speedup)}</td></tr>`).join('');
  main().innerHTML = `<h1>Episodes</h1>
    <form class="filters" id="f"><label>Run <select name="run">${runOpts}</select></label>
    <label>Problem <input name="problem" value="${esc(p.problem || '')}"></label><button type="submit">Filter</button> <a href="#/episodes">clear</a></form>
    <table id="episodes"><thead><tr><th>Time (UTC)</th><th>Run</th><th>Problem</th><th class="num">Sample</th><th class="num">Turns</th><th>Outcome</th><th class="num">Return</th><th class="num">Best speedup</th></tr></thead>
    <tbody>${rows || '<tr><td colspan="8" class="muted">No episode matches.</td></tr>'}</tbody></table>
    <div class="pager">${p.before ? `<a href="#/episodes?${qs({ ...p, before: '' })}">« newest</a>` : ''}
      ${page.next ? `<a href="#/episodes?${qs({ ...p, before: page.next })}">older »</a>` : '<span class="muted">end of results</span>'}</div>`;
  $('#f').onsubmit = (ev) => {
    ev.preventDefault();
    const f = new FormData(ev.target);
    location.hash = `#/episodes?${qs({ run: f.get('run'), problem: f.get('problem') })}`;
  };
  document.querySelectorAll('#episodes tr.click').forEach((tr) => { tr.onclick = () => { location.hash = `#/episode/${encodeURIComponent(tr.dataset.id)}`; }; });
  ready('episodes');
}

/** A completion's text with its thinking (<think>…</think>) folded away. */
function completionHtml(text) {
  const parts = [];
  let rest = text || '';
  const re = /<think>([\s\S]*?)(?:<\/think>|$)/;
  let m;
  while ((m = re.exec(rest))) {
    if (m.index) parts.push(`<pre class="code wrap">${esc(rest.slice(0, m.index))}</pre>`);
    parts.push(`<details class="thinking"><summary>thinking (${m[1].length} characters)</summary><pre class="code wrap">${esc(m[1].trim())}</pre></details>`);
    rest = rest.slice(m.index + m[0].length);
  }
  if (rest.trim()) parts.push(`<pre class="code wrap">${esc(rest.trim())}</pre>`);
  return parts.join('');
}

async function pageEpisode(id) {
  const ep = await api(`/dash/episodes/${encodeURIComponent(id)}`);
  const turns = (ep.turns || []).map((t) => {
    const msgs = t.messages || [];
    const earlier = msgs.slice(0, -1);
    const lastMsg = msgs[msgs.length - 1];
    const ok = t.outcome === 'correct';
    const c = t.completion || {};
    return `<section class="turn ${ok ? 'ok' : 'fail'}" data-turn="${t.turn}">
      <h2>Turn ${t.turn + 1} ${pill(t.outcome)} <span class="muted">reward ${fmtNum(t.reward)} · return ${fmtNum(t.ret)}${t.speedup != null ? ` · speedup ${speed(t.speedup)}` : ''}</span></h2>
      <h3>Prompt</h3>
      ${earlier.length ? `<details><summary class="muted">${earlier.length} earlier message(s)</summary>${earlier.map((m) => `<div class="msg"><div class="role">${esc(m.role)}</div><pre class="code wrap">${esc(m.content)}</pre></div>`).join('')}</details>` : ''}
      ${lastMsg ? `<div class="msg"><div class="role">${esc(lastMsg.role)}</div><pre class="code wrap">${esc(lastMsg.content)}</pre></div>` : ''}
      <h3>Completion <span class="muted">${c.completion_tokens != null ? `${c.completion_tokens} tokens` : ''}${c.finish_reason ? ` · ${esc(c.finish_reason)}` : ''}${c.latency_ms != null ? ` · ${fmtNum(c.latency_ms / 1000)} s` : ''}</span></h3>
      ${completionHtml(c.text)}
      <h3>Extracted code</h3>${t.code ? highlight(t.code) : '<p class="muted">no code extracted</p>'}
      <h3>Feedback</h3><p>${t.stage ? `<b>${esc(t.stage)}</b>: ` : ''}${esc(t.message)}</p>
      ${t.record ? `<p><a href="#/evaluation/${encodeURIComponent(t.record)}">the evaluation record</a></p>` : ''}
    </section>`;
  }).join('');
  main().innerHTML = `<h1>Episode ${esc(ep.id)}</h1>
    <p class="muted">run <a href="#/episodes?${qs({ run: ep.run })}">${esc(ep.run)}</a> · problem ${esc(ep.problem)} · sample ${ep.sample} · backend ${esc(ep.backend)}</p>
    ${ep.error ? `<p class="err">${esc(ep.error)}</p>` : ''}
    <table><thead><tr><th>Turn</th><th>Outcome</th><th class="num">Reward</th><th class="num">Return</th><th class="num">Speedup</th></tr></thead><tbody>
    ${(ep.turns || []).map((t) => `<tr><td>${t.turn + 1}</td><td>${pill(t.outcome)}</td><td class="num">${fmtNum(t.reward)}</td><td class="num">${fmtNum(t.ret)}</td><td class="num">${speed(t.speedup)}</td></tr>`).join('')}</tbody></table>
    ${turns}`;
  ready('episode');
}

async function pageSuite() {
  const s = await api('/dash/suite');
  const levels = new Map();
  for (const p of s.problems) {
    const l = p.level ?? '?';
    if (!levels.has(l)) levels.set(l, new Map());
    const fam = p.family || '(no family)';
    const fams = levels.get(l);
    if (!fams.has(fam)) fams.set(fam, []);
    fams.get(fam).push(p);
  }
  const row = (p) => `<tr><td>${esc(p.id || '')}</td><td><a href="#/evaluations?${qs({ problem: p.name })}">${esc(p.name)}</a></td><td>${esc(p.split || '')}</td>
    <td>${pill(p.status)}</td><td class="num">${p.evaluations}</td><td class="num">${p.correct}</td><td class="num">${speed(p.best_speedup)}</td></tr>`;
  const head = '<thead><tr><th>Id</th><th>Problem</th><th>Split</th><th>Status</th><th class="num">Evaluations</th><th class="num">Correct</th><th class="num">Best speedup</th></tr></thead>';
  const sections = [...levels.entries()].sort((a, b) => String(a[0]).localeCompare(String(b[0]))).map(([l, fams]) => {
    const all = [...fams.values()].flat();
    const solved = all.filter((p) => p.status === 'solved').length;
    const bar = `<div class="bars" title="${solved} of ${all.length} solved"><span style="width:${(100 * solved) / all.length}%;background:#2b8a3e"></span><span style="width:${(100 * all.filter((p) => p.status === 'attempted').length) / all.length}%;background:#e8a33a"></span></div>`;
    const chips = [...fams.entries()].sort().map(([f, ps]) => {
      const n = ps.filter((p) => p.status === 'solved').length;
      return `<span class="pill ${n ? 's-solved' : ps.some((p) => p.status === 'attempted') ? 's-attempted' : ''}">${esc(f)} ${n}/${ps.length}</span>`;
    }).join(' ');
    const body = [...fams.entries()].sort().map(([f, ps]) => `<tr><td colspan="7" class="family">${esc(f)}</td></tr>${ps.map(row).join('')}`).join('');
    return `<div class="level panel"><h2>Level ${esc(l)} <span class="muted">${solved}/${all.length} solved</span></h2>${bar}<p class="chips">${chips}</p><table>${head}<tbody>${body}</tbody></table></div>`;
  }).join('');
  const others = s.others.length ? `<div class="panel"><h2>Other problems <span class="muted">(evaluated, not in the suite)</span></h2><table><thead><tr><th>Problem</th><th>Status</th><th class="num">Evaluations</th><th class="num">Correct</th><th class="num">Best speedup</th></tr></thead><tbody>
    ${s.others.map((p) => `<tr><td><a href="#/evaluations?${qs({ problem: p.name })}">${esc(p.name)}</a></td><td>${pill(p.status)}</td><td class="num">${p.evaluations}</td><td class="num">${p.correct}</td><td class="num">${speed(p.best_speedup)}</td></tr>`).join('')}</tbody></table></div>` : '';
  main().innerHTML = `<h1>Suite</h1>${s.suite ? '' : '<p class="muted">No suite was loaded; only evaluated problems are listed.</p>'}<div id="suite">${sections}${others}</div>`;
  ready('suite');
}

/** A duration in milliseconds, short: `42 s`, `3 min 5 s`, `2 h 7 min`. */
function dur(ms) {
  if (ms == null || !Number.isFinite(ms)) return '—';
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** The evaluation server's queue (jobs of `tritonforge serve`), polled every 2 s. */
async function pageQueue() {
  main().innerHTML = `<h1>Queue</h1><p class="muted" id="qnote"></p>
    <div class="controls"><span id="qcounts"></span><span id="live" class="live"></span></div><div id="queue"></div>`;
  let alive = true;
  const jobCell = (j) => `<code title="${esc(j.id)}">${esc(j.id.length > 14 ? `${j.id.slice(0, 12)}…` : j.id)}</code>`;
  const draw = async () => {
    const q = await api('/dash/queue');
    if (!alive || !$('#queue')) return;
    const now = q.now_ms;
    $('#qnote').textContent = q.mode === 'serve'
      ? 'This server\'s jobs: running ones, then the queue in the order it will run, then the last that ended.'
      : 'The queue of the tritonforge serve that writes this store, as the store holds it (a server killed outright leaves its jobs running here until it starts again).';
    $('#qcounts').innerHTML = ['queued', 'running', 'done', 'failed', 'cancelled'].map((st) => `${pill(st)} <b>${q.counts[st] || 0}</b>`).join(' &nbsp; ');
    const more = (shown, total) => (total > shown ? `<p class="muted">and ${total - shown} more not shown</p>` : '');
    const running = q.running.map((j) => `<tr><td>${jobCell(j)}</td><td>${esc(j.problem)}</td><td>${esc(j.candidate)}</td><td>${esc(j.client)}</td><td>${pill(j.state)}</td>
      <td class="num">${dur(now - j.started_ms)}</td><td class="num">${dur(j.started_ms - j.created_ms)}</td><td class="num">${j.attempts}</td></tr>`).join('');
    const queued = q.queued.map((j, i) => `<tr><td class="num">${i + 1}</td><td>${jobCell(j)}</td><td>${esc(j.problem)}</td><td>${esc(j.candidate)}</td><td>${esc(j.client)}</td><td>${pill(j.state)}</td>
      <td class="num">${dur(now - j.created_ms)}</td><td class="num">${j.attempts || ''}</td></tr>`).join('');
    const recent = q.recent.map((j) => {
      const result = j.record ? `<a href="#/evaluation/${encodeURIComponent(j.record)}">evaluation</a>${j.cached ? ' <span class="muted">(from the cache)</span>' : ''}` : `<span class="muted">${esc(j.error || '')}</span>`;
      return `<tr><td>${jobCell(j)}</td><td>${esc(j.problem)}</td><td>${esc(j.candidate)}</td><td>${esc(j.client)}</td><td>${pill(j.state)}</td>
      <td class="num">${j.finished_ms ? `${dur(now - j.finished_ms)} ago` : '—'}</td><td class="num">${j.started_ms && j.finished_ms ? dur(j.finished_ms - j.started_ms) : '—'}</td><td>${result}</td></tr>`;
    }).join('');
    $('#queue').innerHTML = `<div class="panel"><h2>Running</h2><table id="running"><thead><tr><th>Job</th><th>Problem</th><th>Candidate</th><th>Client</th><th>State</th><th class="num">Running for</th><th class="num">Waited</th><th class="num">Attempts</th></tr></thead>
      <tbody>${running || '<tr><td colspan="8" class="muted">Nothing is running.</td></tr>'}</tbody></table>${more(q.running.length, q.counts.running || 0)}</div>
      <div class="panel"><h2>Queued</h2><table id="queued"><thead><tr><th class="num">#</th><th>Job</th><th>Problem</th><th>Candidate</th><th>Client</th><th>State</th><th class="num">Waiting for</th><th class="num">Attempts</th></tr></thead>
      <tbody>${queued || '<tr><td colspan="8" class="muted">The queue is empty.</td></tr>'}</tbody></table>${more(q.queued.length, q.counts.queued || 0)}</div>
      <div class="panel"><h2>Recently ended</h2><table id="recent"><thead><tr><th>Job</th><th>Problem</th><th>Candidate</th><th>Client</th><th>State</th><th class="num">Ended</th><th class="num">Took</th><th>Result</th></tr></thead>
      <tbody>${recent || '<tr><td colspan="8" class="muted">No job has ended yet.</td></tr>'}</tbody></table></div>`;
    $('#live').textContent = `● live · updated ${new Date(now).toISOString().slice(11, 19)} UTC`;
    document.body.dataset.updates = String((+document.body.dataset.updates || 0) + 1);
  };
  await draw();
  const timer = setInterval(() => {
    draw().catch((e) => { if (alive && $('#live')) $('#live').textContent = `update failed (${e.message}); retrying…`; });
  }, 2000);
  cleanup.push(() => { alive = false; clearInterval(timer); });
  ready('queue');
}

// ---------- routing ----------
async function route() {
  for (const f of cleanup) f();
  cleanup = [];
  delete document.body.dataset.ready;
  const hash = location.hash.replace(/^#\/?/, '') || 'runs';
  const [path, query] = hash.split('?');
  const p = Object.fromEntries(new URLSearchParams(query || ''));
  const [page, ...rest] = path.split('/');
  const arg = decodeURIComponent(rest.join('/'));
  setNav({ evaluation: 'evaluations', episode: 'episodes' }[page] || page);
  try {
    switch (page) {
      case 'runs': await pageRuns(p); break;
      case 'curves': await pageCurves(p); break;
      case 'evaluations': await pageEvaluations(p); break;
      case 'evaluation': await pageEvaluation(arg); break;
      case 'episodes': await pageEpisodes(p); break;
      case 'episode': await pageEpisode(arg); break;
      case 'suite': await pageSuite(); break;
      case 'queue': await pageQueue(); break;
      default: main().innerHTML = `<p class="err">No page ${esc(page)}.</p>`; ready('none');
    }
  } catch (e) {
    main().innerHTML = `<p class="err">${esc(e.message)}</p>`;
    ready('error');
  }
}

window.addEventListener('hashchange', route);
window.addEventListener('DOMContentLoaded', async () => {
  route();
  try {
    const i = await api('/dash/info');
    const q = i.mode === 'serve' ? ` · queue ${i.queue.queued || 0} queued, ${i.queue.running || 0} running` : '';
    $('#info').textContent = `${i.mode === 'serve' ? 'tritonforge serve' : 'tritonforge dashboard'} ${i.version} · ${i.store || ''}${q} · read-only`;
  } catch (e) { /* the page shows the error */ }
});
