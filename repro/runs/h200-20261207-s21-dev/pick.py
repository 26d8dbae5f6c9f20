# Session 21: the A/B winner from moe_ab.py's lines. A variant qualifies when its rel L2 against the reference is within 2% of
# c2's at every T and it is at most 3% slower than c2 at T <= 901; the winner has the least summed latency at
# T = 11948 + 14107 and must beat c2 there by 2%, else c2 (main) stays. Prints the name; reasons go to stderr.
import re, sys

rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"T=(\d+) .*?: (.*)$", line.strip())
    if m:
        rows[int(m[1])] = {k: (float(us), err) for k, us, err in
                           re.findall(r"(\w+) ([\d.]+) us(?: \([\d.]+x\))? \[err ([^\]]+)\]", m[2])}
if not rows or any("c2" not in r for r in rows.values()):
    sys.exit("pick: no A/B rows with c2")
big = [t for t in (11948, 14107) if t in rows]
total = {k: sum(rows[t][k][0] for t in big) for k in rows[big[0]]} if big else {}
ok = {}
for k in total:
    why = [f"T={t} err {r[k][1]} vs c2 {r['c2'][1]}" for t, r in rows.items() if float(r[k][1]) > 1.02 * float(r["c2"][1]) + 1e-6]
    why += [f"T={t} {r[k][0] / r['c2'][0]:.3f}x c2" for t, r in rows.items() if t <= 901 and r[k][0] > 1.03 * r["c2"][0]]
    print(f"pick: {k} {total[k]:.1f} us at T={big} ({total[k] / total['c2']:.3f}x c2) {'; '.join(why) or 'qualifies'}",
          file=sys.stderr)
    if not why:
        ok[k] = total[k]
best = min(ok, key=ok.get) if ok else "c2"
print(best if ok.get(best, 1e30) < 0.98 * total["c2"] else "c2")
