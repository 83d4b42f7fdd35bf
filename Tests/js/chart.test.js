// Unit tests of dashboard/chart.js's zoom bounds (the drawing itself is checked in Chromium).
// Run by `make test` (node --test).
import assert from "node:assert/strict";
import { test } from "node:test";

import { clampPoints, MAX_POINTS, MIN_POINTS } from "../../dashboard/chart.js";

test("the points asked for stay within what the API allows, rounded", () => {
  assert.equal(clampPoints(0), MIN_POINTS);
  assert.equal(clampPoints(199.6), 200);
  assert.equal(clampPoints(5000), MAX_POINTS);
  assert.deepEqual([MIN_POINTS, MAX_POINTS], [2, 1000]);
});
