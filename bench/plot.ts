// Line charts as SVG, written by hand (no plotting library): log-scale x (the number of services)
// or linear x (time, for the soak), linear or log y, one line per series with its spread as whiskers, an optional
// reference line (1× in a ratio chart), a legend; charts stack into one picture. PNGs are made from
// the SVGs with rsvg-convert (librsvg2-bin).

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCommand } from '../src/host/command.js';

export interface Series {
  name: string;
  color: string;
  points: { x: number; y: number }[];
  dashed?: boolean;
  /** Each point's spread (e.g. min and max over the repetitions), drawn as a whisker at its x. */
  spread?: { x: number; lo: number; hi: number }[];
}

export interface Chart {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  /** A y value drawn as a grey dashed line across the plot, kept inside the range (1 in a ratio). */
  reference?: number;
  /** Default log: the benchmark's service counts; linear for time (the soak). */
  xScale?: 'log' | 'linear';
  /** The plot area's width in px (default 450); an hour of samples every 5 s wants more. */
  plotWidth?: number;
  /** Default: log when every y is positive and they span more than 30×; 'linear' always linear (a
   * rate over time whose last window, the end, is nearly empty). */
  yScale?: 'auto' | 'linear';
}

export const MODE_COLORS: Record<string, string> = {
  // No proxy: the physical limit, in black.
  direct: '#000000',
  bpf: '#1b7837',
  'bpf-sock': '#5aae61',
  iptables: '#c51b7d',
  nftables: '#2166ac',
  ipvs: '#e08214',
  // The real kube-proxy: the colour of the mode of ours that re-implements it, lighter.
  'kube-proxy-iptables': '#f1b6da',
  'kube-proxy-nftables': '#92c5de',
  'kube-proxy-ipvs': '#fdb863',
};

const HEIGHT = 440;
const PLOT_WIDTH = 450;
const MARGIN = { left: 80, top: 48, bottom: 56 };
/** The legend: a gap, a 26 px line sample, a 6 px gap, then the name; DejaVu Sans at 12 px is at
 * most ~7.5 px a character, so the picture is as wide as its longest name needs. */
const LEGEND_NAME_X = 14 + 32;
const LEGEND_CHAR_PX = 7.5;

/** A series with more points than this is drawn as a thin line without a dot per point: an
 * hour's samples every 5 s would otherwise be a band of dots. */
const DOTTED_POINTS_MAX = 60;

/** The picture's width: the plot, then a legend wide enough for the longest series name. */
export function chartWidth(seriesNames: readonly string[], plotWidth = PLOT_WIDTH): number {
  const longest = Math.max(0, ...seriesNames.map((name) => name.length));
  return MARGIN.left + plotWidth + LEGEND_NAME_X + Math.ceil(longest * LEGEND_CHAR_PX) + 12;
}

const escapeXml = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

function formatTick(v: number): string {
  if (v === 0) return '0';
  if (v >= 1_000_000) return `${v / 1_000_000}M`;
  if (v >= 1000) return `${v / 1000}k`;
  if (v >= 1) return String(Number(v.toPrecision(3)));
  return v.toPrecision(2);
}

/** 1-2-5 ticks covering [lo, hi]: the last tick is at or above hi, so no point leaves the frame. */
export function linearTicks(lo: number, hi: number): number[] {
  const span = hi - lo || Math.abs(hi) || 1;
  const raw = span / 5;
  const magnitude = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * magnitude).find((s) => s >= raw) ?? raw;
  const top = Math.ceil(hi / step - 1e-9) * step;
  const ticks: number[] = [];
  for (let v = Math.floor(lo / step) * step; v <= top + step * 1e-9; v += step)
    ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function logTicks(lo: number, hi: number): number[] {
  const ticks: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) ticks.push(10 ** e);
  return ticks;
}

/** Charts one above the other in one picture (nested svg elements), as wide as the widest. */
export function stackedSvg(charts: readonly Chart[]): string {
  const parts = charts.map(chartSvg);
  if (parts.length === 1) return parts[0]!;
  const width = Math.max(
    ...charts.map((c) =>
      chartWidth(
        c.series.map((s) => s.name),
        c.plotWidth,
      ),
    ),
  );
  const height = HEIGHT * parts.length;
  const nested = parts.map((svg, i) => svg.replace('<svg ', `<svg x="0" y="${i * HEIGHT}" `));
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">\n<rect width="${width}" height="${height}" fill="#ffffff"/>\n${nested.join('')}</svg>\n`;
}

/** The x axis: its ticks and where a value sits on it, from 0 (left) to 1 (right). */
function xAxis(scale: 'log' | 'linear', xs: number[]): { ticks: number[]; at: (x: number) => number } {
  if (scale === 'linear') {
    const ticks = linearTicks(Math.min(0, ...xs), Math.max(1, ...xs));
    const lo = ticks[0] ?? 0;
    const hi = ticks.at(-1) ?? 1;
    return { ticks, at: (x) => (x - lo) / (hi - lo || 1) };
  }
  const ticks = logTicks(Math.min(...xs, 1), Math.max(...xs, 10));
  const lo = Math.log10(ticks[0] ?? 1);
  const hi = Math.max(Math.log10(ticks.at(-1) ?? 10), lo + 1);
  return { ticks, at: (x) => (Math.log10(x) - lo) / (hi - lo) };
}

export function chartSvg(chart: Chart): string {
  const scale = chart.xScale ?? 'log';
  const onAxis = (p: { x: number }) => scale === 'linear' || p.x > 0;
  const points = chart.series.flatMap((s) => s.points).filter((p) => Number.isFinite(p.y) && onAxis(p));
  const spreads = chart.series.flatMap((s) => s.spread ?? []).filter(onAxis);
  const xs = points.map((p) => p.x);
  const ys = [
    ...points.map((p) => p.y),
    ...spreads.flatMap((p) => [p.lo, p.hi]).filter(Number.isFinite),
    ...(chart.reference === undefined ? [] : [chart.reference]),
  ];
  const { ticks: xTicks, at: xAt } = xAxis(scale, xs);
  const yPositive = ys.length > 0 && Math.min(...ys) > 0;
  const logY = chart.yScale !== 'linear' && yPositive && Math.max(...ys) / Math.min(...ys) > 30;
  // Only zeros (no request failed) still get an axis from 0 to 1, not one tick.
  const yTop = Math.max(0, ...ys) > 0 ? Math.max(...ys) * 1.05 : 1;
  const yTicks = logY ? logTicks(Math.min(...ys), Math.max(...ys)) : linearTicks(Math.min(0, ...ys), yTop);
  const yLo = logY ? Math.log10(yTicks[0] ?? 1) : (yTicks[0] ?? 0);
  const yHi = logY ? Math.log10(yTicks.at(-1) ?? 10) : (yTicks.at(-1) ?? 1);
  const plotW = chart.plotWidth ?? PLOT_WIDTH;
  const width = chartWidth(
    chart.series.map((s) => s.name),
    plotW,
  );
  const plotH = HEIGHT - MARGIN.top - MARGIN.bottom;
  const px = (x: number) => MARGIN.left + xAt(x) * plotW;
  const py = (y: number) =>
    MARGIN.top + plotH - (((logY ? Math.log10(y) : y) - yLo) / (yHi - yLo || 1)) * plotH;

  const out: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${HEIGHT}" viewBox="0 0 ${width} ${HEIGHT}" font-family="DejaVu Sans, Arial, sans-serif" font-size="12">`,
    `<rect width="${width}" height="${HEIGHT}" fill="#ffffff"/>`,
    `<text x="${width / 2}" y="26" text-anchor="middle" font-size="15" font-weight="bold">${escapeXml(chart.title)}</text>`,
  ];
  for (const t of xTicks) {
    const x = px(t).toFixed(1);
    out.push(`<line x1="${x}" y1="${MARGIN.top}" x2="${x}" y2="${MARGIN.top + plotH}" stroke="#e5e5e5"/>`);
    out.push(`<text x="${x}" y="${MARGIN.top + plotH + 18}" text-anchor="middle">${formatTick(t)}</text>`);
  }
  for (const t of yTicks) {
    const y = py(t).toFixed(1);
    out.push(`<line x1="${MARGIN.left}" y1="${y}" x2="${MARGIN.left + plotW}" y2="${y}" stroke="#e5e5e5"/>`);
    out.push(
      `<text x="${MARGIN.left - 8}" y="${y}" text-anchor="end" dominant-baseline="middle">${formatTick(t)}</text>`,
    );
  }
  out.push(
    `<rect x="${MARGIN.left}" y="${MARGIN.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#333"/>`,
    `<text x="${MARGIN.left + plotW / 2}" y="${HEIGHT - 14}" text-anchor="middle">${escapeXml(chart.xLabel)}</text>`,
    `<text transform="translate(18 ${MARGIN.top + plotH / 2}) rotate(-90)" text-anchor="middle">${escapeXml(
      chart.yLabel + (logY ? ' (log scale)' : ''),
    )}</text>`,
  );
  if (chart.reference !== undefined) {
    const y = py(chart.reference).toFixed(1);
    out.push(
      `<line x1="${MARGIN.left}" y1="${y}" x2="${MARGIN.left + plotW}" y2="${y}" stroke="#888888" stroke-width="1.5" stroke-dasharray="3 3"/>`,
    );
  }
  // Whiskers at one N sit side by side, 4 px apart, so each stays readable.
  const whiskered = chart.series.filter((s) => (s.spread ?? []).length > 0);
  const dodge = (series: Series) => (whiskered.indexOf(series) - (whiskered.length - 1) / 2) * 4;
  chart.series.forEach((series, i) => {
    for (const s of series.spread ?? []) {
      if (!onAxis(s) || !Number.isFinite(s.lo) || !Number.isFinite(s.hi)) continue;
      const x = px(s.x) + dodge(series);
      const [top, bottom] = [py(s.hi).toFixed(1), py(s.lo).toFixed(1)];
      out.push(
        `<path d="M${(x - 5).toFixed(1)},${top} H${(x + 5).toFixed(1)} M${x.toFixed(1)},${top} V${bottom} M${(x - 5).toFixed(1)},${bottom} H${(x + 5).toFixed(1)}" stroke="${series.color}" stroke-width="1.5" fill="none"/>`,
      );
    }
    const valid = series.points.filter((p) => Number.isFinite(p.y) && onAxis(p)).sort((a, b) => a.x - b.x);
    const dash = series.dashed ? ' stroke-dasharray="6 4"' : '';
    const dotted = valid.length <= DOTTED_POINTS_MAX;
    if (valid.length > 1) {
      const d = valid
        .map((p, k) => `${k === 0 ? 'M' : 'L'}${px(p.x).toFixed(1)},${py(p.y).toFixed(1)}`)
        .join(' ');
      out.push(
        `<path d="${d}" fill="none" stroke="${series.color}" stroke-width="${series.dashed || !dotted ? 1.5 : 2.5}"${dash}/>`,
      );
    }
    for (const p of dotted ? valid : []) {
      out.push(
        `<circle cx="${px(p.x).toFixed(1)}" cy="${py(p.y).toFixed(1)}" r="3.5" fill="${series.color}"/>`,
      );
    }
    const ly = MARGIN.top + 10 + i * 20;
    const lx = MARGIN.left + plotW + 14;
    out.push(
      `<line x1="${lx}" y1="${ly}" x2="${lx + 26}" y2="${ly}" stroke="${series.color}" stroke-width="2.5"${dash}/>`,
    );
    out.push(`<text x="${lx + 32}" y="${ly}" dominant-baseline="middle">${escapeXml(series.name)}</text>`);
  });
  out.push('</svg>');
  return `${out.join('\n')}\n`;
}

/** Writes the chart as an SVG and a PNG, named `name`, in the plots folder of `dir`. */
export async function writePlot(dir: string, name: string, svg: string): Promise<void> {
  const svgPath = join(dir, 'plots', `${name}.svg`);
  writeFileSync(svgPath, svg);
  await runCommand('rsvg-convert', ['-o', join(dir, 'plots', `${name}.png`), svgPath]);
}
