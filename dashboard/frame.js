// Drawing at most once per animation frame: a change marks what it touched (the model's
// dirty ids, a module's dirty flag) and asks for a frame; the entry module's draw function
// then brings the DOM up to date.

let draw = () => {};
let requested = false;

/// Counters for measurements (bench/dashboard.py reads them as `window.headwayStats`):
/// events applied, frames drawn, rows updated; events dropped as already applied, streams
/// opened, the last one's URL and whether it is the whole stream (too much to name).
export const stats = { events: 0, frames: 0, rowUpdates: 0, duplicates: 0, streamsOpened: 0, streamURL: "", wholeStream: false };

/// The function that draws a frame (app.js sets it).
export function setDraw(fn) { draw = fn; }

export function scheduleRender() {
  if (requested) return;
  requested = true;
  requestAnimationFrame(() => {
    requested = false;
    stats.frames += 1;
    draw();
  });
}
