// A small live line chart on <canvas>: named series of (time, value) points, the last few minutes
// kept. The number of points drawn is kept in the canvas's data-points attribute.
const PALETTE = ["#1f6feb", "#d4a72c", "#1a7f37", "#cf222e", "#8250df", "#bf3989", "#0a7d91", "#953800"];

export class LiveChart {
  constructor(canvas, { windowMs = 5 * 60 * 1000, unit = "" } = {}) {
    this.canvas = canvas;
    this.windowMs = windowMs;
    this.unit = unit;
    this.series = new Map(); // name -> {color, points: [[t, v]]}
    this.samples = 0;
    canvas.dataset.points = "0";
  }

  push(time, values) {
    for (const [name, value] of Object.entries(values)) {
      if (!this.series.has(name)) this.series.set(name, { color: PALETTE[this.series.size % PALETTE.length], points: [] });
      const points = this.series.get(name).points;
      points.push([time, Number.isFinite(value) ? value : 0]);
      while (points.length && points[0][0] < time - this.windowMs) points.shift();
    }
    this.samples += 1;
    this.canvas.dataset.points = String(this.samples);
    this.draw();
  }

  draw() {
    const canvas = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || 400;
    const height = canvas.clientHeight || 200;
    if (canvas.width !== Math.round(width * ratio)) canvas.width = Math.round(width * ratio);
    if (canvas.height !== Math.round(height * ratio)) canvas.height = Math.round(height * ratio);
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    const left = 56, right = 8, top = 22, bottom = 20;
    const all = [...this.series.values()].flatMap((s) => s.points);
    const now = all.length ? Math.max(...all.map((p) => p[0])) : Date.now();
    const t0 = now - this.windowMs;
    let max = Math.max(1, ...all.map((p) => p[1]));
    const step = niceStep(max / 4);
    max = Math.ceil(max / step) * step;
    const x = (t) => left + ((t - t0) / this.windowMs) * (width - left - right);
    const y = (v) => top + (1 - v / max) * (height - top - bottom);
    g.font = "11px system-ui, sans-serif";
    g.strokeStyle = "#d0d7de";
    g.fillStyle = "#656d76";
    g.lineWidth = 1;
    for (let v = 0; v <= max + step / 2; v += step) {
      g.beginPath(); g.moveTo(left, y(v)); g.lineTo(width - right, y(v)); g.stroke();
      g.textAlign = "right"; g.fillText(formatNumber(v) + this.unit, left - 4, y(v) + 4);
    }
    g.textAlign = "center";
    for (let m = 0; m <= this.windowMs / 60000; m += 1) {
      const t = now - m * 60000;
      g.fillText(m === 0 ? "now" : `-${m}m`, x(t), height - 5);
    }
    let legendX = left;
    for (const [name, s] of this.series) {
      g.strokeStyle = s.color; g.lineWidth = 2;
      g.beginPath();
      s.points.forEach(([t, v], i) => (i ? g.lineTo(x(t), y(v)) : g.moveTo(x(t), y(v))));
      g.stroke();
      if (s.points.length === 1) { g.fillStyle = s.color; g.fillRect(x(s.points[0][0]) - 2, y(s.points[0][1]) - 2, 4, 4); }
      g.fillStyle = s.color; g.fillRect(legendX, 6, 10, 10);
      g.fillStyle = "#1f2328"; g.textAlign = "left";
      const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
      const label = `${name} ${formatNumber(last)}${this.unit}`;
      g.fillText(label, legendX + 14, 15);
      legendX += g.measureText(label).width + 30;
    }
  }
}

function niceStep(raw) {
  const power = 10 ** Math.floor(Math.log10(raw || 1));
  for (const m of [1, 2, 2.5, 5, 10]) if (raw <= m * power) return m * power;
  return 10 * power;
}

export function formatNumber(v) {
  if (!Number.isFinite(v)) return "-";
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (Number.isInteger(v)) return String(v);
  return a >= 100 ? v.toFixed(0) : a >= 1 ? v.toFixed(1) : v.toFixed(2);
}
