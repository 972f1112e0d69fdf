"""Check a tune report's chart against its JSON and against the journal (test only).

    python check_chart.py --journal journal.jsonl --report reports/tune-<time>.json

1. The JSON's points are exactly the journal's: one per measured trial of this tune and
   concurrency, x = tok/s per user, y = output tok/s per GPU (from each line's metrics).
2. The JSON's frontier is the Pareto frontier of the points meeting the SLO (its
   ``frontier_over`` says ``meets_slo``), computed here on its own (a point is on it when
   no other such point is at least as good on both axes and better on one), in x order; no
   point missing the SLO is on it.
3. The PNG beside the JSON (decoded here with zlib, no imaging library) draws exactly them:
   each point's pixel position is computed from the JSON alone (matplotlib's default axes
   box of a 9x6 in, 100 dpi figure; the x range over the points and the TPOT target with
   5 % margins, which must be the JSON's ``axes.x_range``; the y range matplotlib's 5 %
   autoscale margins over the points; log where the JSON's axes say so), and a marker of
   the point's colour (blue: meets the SLO; gray: misses it; the winner, and any point the
   winner's star covers, red) must be within 4 px of it; every blue marker blob outside
   the legend must sit on a JSON point; the frontier line (orange) is drawn when it has two
   points or more.
4. The band outside the TPOT target runs from the plot's left edge to 1000 / tpot_p99_ms:
   the band's tint fills most of the axes' height just inside the left edge and just left
   of the target, and not just right of it.
Prints a JSON summary; exits 1 with the reasons when a check fails.
"""

import argparse
import json
import struct
import sys
import zlib

COLORS = {"blue": (31, 119, 180), "gray": (127, 127, 127), "orange": (255, 127, 14), "red": (214, 39, 40)}


def _text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB or RGBA, non-interlaced PNG."""
    with open(path, "rb") as fh:
        data = fh.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, ctype, _c, _f, interlace = header
    if depth != 8 or ctype not in (2, 6) or interlace:
        raise ValueError("unsupported PNG (depth %d, colour type %d, interlace %d)" % (depth, ctype, interlace))
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        ftype, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], (prev[i - bpp] if i >= bpp else 0)
            if ftype == 1:
                line[i] = (line[i] + a) & 255
            elif ftype == 2:
                line[i] = (line[i] + b) & 255
            elif ftype == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ftype == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else (b if pb <= pc else c))) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(width)])
        prev = line
    return width, height, rows


def blobs(rows, rgb, tol=12):
    """Connected components (8-neighbour) of the pixels within tol of rgb."""
    height, width = len(rows), len(rows[0])
    mask = [[all(abs(p[k] - rgb[k]) <= tol for k in range(3)) for p in row] for row in rows]
    seen, comps = set(), []
    for y in range(height):
        for x in range(width):
            if mask[y][x] and (x, y) not in seen:
                stack, size = [(x, y)], 0
                seen.add((x, y))
                while stack:
                    cx, cy = stack.pop()
                    size += 1
                    for dx in (-1, 0, 1):
                        for dy in (-1, 0, 1):
                            nx, ny = cx + dx, cy + dy
                            if 0 <= nx < width and 0 <= ny < height and mask[ny][nx] and (nx, ny) not in seen:
                                seen.add((nx, ny))
                                stack.append((nx, ny))
                comps.append(size)
    return comps


AXES_PX = (112.5, 810.0, 72.0, 534.0)  # left, right, top, bottom of the default subplot
STAR_RADIUS_PX = 10.3  # the winner's marker: sqrt(220) pt across at 100 dpi, halved


BAND = (251, 238, 238)  # tab:red at alpha 0.08 over white


def _scale(values, log):
    import math  # pylint: disable=import-outside-toplevel
    vals = [math.log10(v) for v in values] if log else list(values)
    lo, hi = min(vals), max(vals)
    margin = 0.05 * (hi - lo)
    return lo - margin, hi + margin, log


def x_range(report):
    """The x range the chart must have: the points and the TPOT target, 5 % margins."""
    axes = report.get("axes") or {}
    xs = [p["x"] for p in report["points"]]
    limit = axes.get("tpot_limit_x")
    if xs and limit:
        xs = xs + [limit]
    lo, hi, log = _scale(xs, axes.get("x_log"))
    return [10 ** lo, 10 ** hi] if log else [lo, hi]


def transform(report):
    """data (x, y) -> pixel (col, row) as matplotlib lays the report's chart out."""
    import math  # pylint: disable=import-outside-toplevel
    axes = report.get("axes") or {}
    ys = [p["y"] for p in report["points"]]
    lo, hi = x_range(report)
    log = axes.get("x_log")
    sx = (math.log10(lo), math.log10(hi), log) if log else (lo, hi, log)
    sy = _scale(ys, axes.get("y_log"))
    left, right, top, bottom = AXES_PX

    def to_px(x, y):
        fx = ((math.log10(x) if sx[2] else x) - sx[0]) / (sx[1] - sx[0])
        fy = ((math.log10(y) if sy[2] else y) - sy[0]) / (sy[1] - sy[0])
        return left + fx * (right - left), bottom - fy * (bottom - top)
    return to_px


def near(rows, col, row, rgb, radius=4, tol=12):
    for y in range(int(row) - radius, int(row) + radius + 1):
        for x in range(int(col) - radius, int(col) + radius + 1):
            if 0 <= y < len(rows) and 0 <= x < len(rows[0]) and all(abs(rows[y][x][k] - rgb[k]) <= tol for k in range(3)):
                return True
    return False


def centroids(rows, rgb, tol=12, min_size=6):
    """Centres of the connected blobs of colour rgb (at least min_size pixels)."""
    height, width = len(rows), len(rows[0])
    seen, out = set(), []
    for y in range(height):
        for x in range(width):
            if (x, y) in seen or not all(abs(rows[y][x][k] - rgb[k]) <= tol for k in range(3)):
                continue
            stack, pix = [(x, y)], []
            seen.add((x, y))
            while stack:
                cx, cy = stack.pop()
                pix.append((cx, cy))
                for dx in (-1, 0, 1):
                    for dy in (-1, 0, 1):
                        nx, ny = cx + dx, cy + dy
                        if (0 <= nx < width and 0 <= ny < height and (nx, ny) not in seen
                                and all(abs(rows[ny][nx][k] - rgb[k]) <= tol for k in range(3))):
                            seen.add((nx, ny))
                            stack.append((nx, ny))
            if len(pix) >= min_size:
                out.append((sum(p[0] for p in pix) / len(pix), sum(p[1] for p in pix) / len(pix)))
    return out


def band_share(rows, col, rgb=BAND, tol=3):
    """The share of the axes' rows whose pixel in column ``col`` has the band's tint."""
    _left, _right, top, bottom = AXES_PX
    ys = range(int(top) + 2, int(bottom) - 1)
    hits = sum(1 for y in ys if all(abs(rows[y][int(col)][k] - rgb[k]) <= tol for k in range(3)))
    return hits / float(len(ys))


def pareto(points):
    front = [p for p in points
             if not any((q["x"] >= p["x"] and q["y"] >= p["y"]) and (q["x"] > p["x"] or q["y"] > p["y"])
                        for q in points)]
    return sorted(front, key=lambda p: (p["x"], -p["y"]))


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--journal", required=True)
    ap.add_argument("--report", required=True)
    args = ap.parse_args(argv)
    report = json.loads(_text(args.report))
    ids = {row["id"] for row in report["rows"]}
    lines = [json.loads(line) for line in _text(args.journal).splitlines() if line.strip()]
    trials = [t for t in lines if t.get("kind") == "trial" and t["candidate"]["id"] in ids and t["status"] == "ok"]
    problems = []

    expect = sorted((t["candidate"]["id"], m["concurrency"], round(m["tok_s_per_user"], 6), round(m["output_tok_s_per_gpu"], 6))
                    for t in trials for m in t["metrics"]
                    if m.get("tok_s_per_user") is not None and m.get("output_tok_s_per_gpu") is not None)
    got = sorted((p["id"], p["concurrency"], round(p["x"], 6), round(p["y"], 6)) for p in report["points"])
    if got != expect:
        problems.append("the JSON's points are not the journal's: %s != %s" % (got, expect))

    if report.get("frontier_over") != "meets_slo":
        problems.append("the JSON does not say its frontier is over the points meeting the SLO: %r"
                        % (report.get("frontier_over"),))
    mine = [(p["id"], p["concurrency"]) for p in pareto([p for p in report["points"] if p["meets_slo"]])]
    theirs = [(p["id"], p["concurrency"]) for p in report["frontier"]]
    if mine != theirs:
        problems.append("the JSON's frontier %s is not the Pareto frontier of the points meeting the SLO %s"
                        % (theirs, mine))
    missing = set((p["id"], p["concurrency"]) for p in report["points"] if not p["meets_slo"])
    if missing & set(theirs):
        problems.append("the frontier runs through points missing the SLO: %s" % sorted(missing & set(theirs)))
    want_range = x_range(report) if report["points"] else None
    got_range = (report.get("axes") or {}).get("x_range")
    if want_range and (not got_range or any(abs(a - b) > 1e-6 * max(abs(b), 1) for a, b in zip(got_range, want_range))):
        problems.append("the JSON's x range %s is not the points' and the target's %s" % (got_range, want_range))

    png = args.report[:-len(".json")] + ".png"
    width, height, rows = read_png(png)
    found = {name: blobs(rows, rgb) for name, rgb in COLORS.items()}
    to_px = transform(report)
    win = report.get("winner") or {}
    star = next((to_px(p["x"], p["y"]) for p in report["points"]
                 if p["id"] == win.get("id") and p["concurrency"] == win.get("concurrency")), None)
    placed = []
    for p in report["points"]:
        col, row = to_px(p["x"], p["y"])
        placed.append((col, row))
        # the winner's star (s=220 pt^2: about 20 px across, drawn above the other markers)
        # covers a point that lies within its outer radius: that point shows red
        under_star = star is not None and ((col - star[0]) ** 2 + (row - star[1]) ** 2) ** 0.5 <= STAR_RADIUS_PX
        colour = "red" if under_star else ("blue" if p["meets_slo"] else "gray")
        if not near(rows, col, row, COLORS[colour]):
            problems.append("no %s marker at (%.0f, %.0f) for %s c=%s" % (colour, col, row, p["id"], p["concurrency"]))
    # every blue marker drawn is a JSON point, but the legend's: the one with the legend's
    # frontier line entry (orange, the same column) just below it
    for col, row in centroids(rows, COLORS["blue"]):
        in_legend = any(near(rows, col + dx, row + dy, COLORS["orange"], radius=2)
                        for dx in (-8, 0, 8) for dy in range(12, 46, 4))
        if not in_legend and not any(abs(col - c) <= 6 and abs(row - r) <= 6 for c, r in placed):
            problems.append("a blue marker at (%.0f, %.0f) is no point of the JSON" % (col, row))
    if len(report["frontier"]) >= 2 and sum(found["orange"]) < 50:
        problems.append("the chart draws no frontier line")
    if report.get("winner") and max(found["red"] or [0]) < 30:
        problems.append("the chart does not mark the winner")
    limit = (report.get("axes") or {}).get("tpot_limit_x")
    band = {}
    if report["points"] and limit:
        left, right = AXES_PX[0], AXES_PX[1]
        edge = to_px(limit, report["points"][0]["y"])[0]
        # the spine and its anti-aliased edge take the first two columns inside the axes
        band = {"left_edge": round(band_share(rows, left + 4), 3), "target_px": round(edge, 1)}
        if band["left_edge"] < 0.5:
            problems.append("the band outside the TPOT target does not start at the left edge "
                            "(%.0f %% of column %d tinted)" % (100 * band["left_edge"], left + 4))
        if edge - 3 > left + 4:
            band["below_target"] = round(band_share(rows, edge - 3), 3)
            if band["below_target"] < 0.5:
                problems.append("the band does not reach the TPOT target at x %.0f px" % edge)
        if edge + 3 < right - 2:
            band["above_target"] = round(band_share(rows, edge + 3), 3)
            if band["above_target"] > 0.05:
                problems.append("the band runs past the TPOT target at x %.0f px" % edge)

    summary = {"points": len(got), "frontier": theirs, "png": [width, height],
               "blobs": {k: len([b for b in v if b >= 6]) for k, v in found.items()}, "band": band,
               "problems": problems}
    print(json.dumps(summary))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
