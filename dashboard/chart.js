// The history chart: an inline SVG line of the fraction done over time.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 600;
const HEIGHT = 200;
const PAD = 6;

/// Draws `points` ({t, fraction}) into `svg`, the time axis running to `until` when given
/// (now, for a task still running: the line ends where its last report was); returns how
/// many were drawn and the times of the first and of the axis' end.
export function drawHistory(svg, points, until = null) {
  svg.replaceChildren();
  const grid = document.createElementNS(SVG, "path");
  grid.setAttribute("class", "grid");
  let d = "";
  for (const y of [0, 0.25, 0.5, 0.75, 1]) {
    const py = PAD + (1 - y) * (HEIGHT - 2 * PAD);
    d += `M0 ${py.toFixed(1)}H${WIDTH} `;
  }
  grid.setAttribute("d", d);
  svg.append(grid);
  const usable = points.filter((p) => p.fraction !== null);
  if (usable.length === 0) return { count: 0 };
  const times = usable.map((p) => Date.parse(p.t));
  const first = times[0];
  const end = Math.max(times[times.length - 1], until ? until.getTime() : 0);
  const span = Math.max(1, end - first);
  const coords = usable.map((p, index) => {
    const x = usable.length === 1 && end === first ? WIDTH / 2 : ((times[index] - first) / span) * WIDTH;
    const y = PAD + (1 - p.fraction) * (HEIGHT - 2 * PAD);
    return `${x.toFixed(1)},${y.toFixed(1)}`;
  });
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("class", "line");
  line.setAttribute("points", coords.join(" "));
  line.setAttribute("vector-effect", "non-scaling-stroke");
  svg.append(line);
  if (end > times[times.length - 1]) {
    // From the last report to now, the fraction stood still: drawn dashed.
    const rest = document.createElementNS(SVG, "path");
    rest.setAttribute("class", "since");
    rest.setAttribute("d", `M${coords[coords.length - 1]}H${WIDTH}`);
    rest.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(rest);
  }
  return { count: usable.length, first: new Date(first), last: new Date(end) };
}

/// The zoom levels: max_points the API allows (2..1000).
export const MIN_POINTS = 2;
export const MAX_POINTS = 1000;

export function clampPoints(n) { return Math.min(MAX_POINTS, Math.max(MIN_POINTS, Math.round(n))); }
