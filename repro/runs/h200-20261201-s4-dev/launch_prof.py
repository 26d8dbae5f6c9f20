import ctypes, json, os, sys, tempfile, statistics, torch
sys.path.insert(0, os.getcwd())
from sdk.gate.spans import annotated_spans
from torch.profiler import profile, ProfilerActivity, record_function
lib = ctypes.CDLL(sys.argv[1])
buf = torch.empty(7168 * 1000, dtype=torch.uint8, device="cuda")
s = torch.cuda.current_stream().cuda_stream
names = {0: "<<<>>>", 1: "LaunchKernelEx", 2: "LaunchKernelEx+PDL", 3: "PDL + 3 encodes + 2 GetDevice"}
for n in (1, 5):
    for v in names:
        for _ in range(5): lib.chain(v, n, ctypes.c_void_p(s), ctypes.c_void_p(buf.data_ptr()))
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for i in range(30):
                with record_function(f"c-#{i}"):
                    lib.chain(v, n, ctypes.c_void_p(s), ctypes.c_void_p(buf.data_ptr()))
            torch.cuda.synchronize()
        fd, p = tempfile.mkstemp(suffix=".json"); os.close(fd); prof.export_chrome_trace(p); tr = json.load(open(p)); os.unlink(p)
        spans = list(annotated_spans(tr, "c-#").values())
        rt = {}
        for e in tr["traceEvents"]:
            if e.get("cat") in ("cuda_runtime", "cuda_driver"): rt.setdefault(e["name"], []).append(e.get("dur", 0))
        print(f"n={n} {names[v]:32s} span median {statistics.median(spans)*1e3:7.2f} us; api:",
              {k: (len(x)//30, round(statistics.median(x), 2)) for k, x in rt.items()})
