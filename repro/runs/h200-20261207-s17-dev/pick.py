# Session 17: the A/B winner from moe_ab.py's output (argv[1]): the variant with the lowest geomean of latency
# ratios vs landed over the cases, among those whose rel L2 never exceeds landed's by more than 1e-3; prints its
# name, or "landed" when none is 1% faster. Prints nothing when the output has no complete case.
import math, re, sys

ratios, bad = {}, set()
for line in open(sys.argv[1]):
    if not line.startswith("T="):
        continue
    parts = dict((m[0], (float(m[1]), float(m[2])))
                 for m in re.findall(r"(\w+) ([\d.]+) us(?: \([\d.]+x\))? \[err ([^\]]+)\]", line))
    if "landed" not in parts:
        continue
    base_t, base_e = parts.pop("landed")
    for k, (t, e) in parts.items():
        ratios.setdefault(k, []).append(t / base_t)
        if not e <= base_e + 1e-3:
            bad.add(k)
score = {k: math.exp(sum(map(math.log, v)) / len(v)) for k, v in ratios.items() if k not in bad}
for k, v in sorted(score.items(), key=lambda kv: kv[1]):
    print(f"{k} {v:.4f} over {len(ratios[k])} cases", file=sys.stderr)
if ratios:
    best = min(score, key=score.get, default=None)
    print(best if best and score[best] < 0.99 else "landed")
