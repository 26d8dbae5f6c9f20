"""Second round of hostile packages (h2_*): what each is, and what today's gate does with it.

EXPECTED[name]:
  class       1 tampering from inside the process, 2 telling timed from checked calls, 3 work the timer or the
              guards do not see, 4 precomputed answers for the default seed, 5 the tolerance rule
  needs_gpu   the cheat only acts on a GPU (on CPU the package is honest, or the signal it reads is absent)
  scan        whether the static scan (sdk/gate/scan.py) is expected to catch it (False: built to pass it)
  definition  the definition it solves
  tell_log    it appends "computed" / "cheated" per call to $FIB_TELL_LOG (an absolute path) when set
  fools_today what the red-team run on CPU saw (gate_solution, trials=2, TIMING of support.py, scan=True unless
              the scan catches it): "yes", "no", "racy", or "gpu-only" (not run: no GPU here)
  why         one line

The tell-log writes pass the scan (os.path.join(<dir of __file__>, <absolute path>) is "derived from
__file__" for the file-access rule, yet lands anywhere), so all h2 packages except h2_gc_checkers can run with
scan=True. MoE packages are slow on CPU (full-size weights: ~25 s per input draw).
"""
ATTENTION = "dsa_sparse_attention_h16_ckv512_kpe64_topk2048_ps64"
INDEXER = "dsa_topk_indexer_fp8_h64_d128_topk2048_ps64"
MOE = "moe_fp8_block_scale_ds_routing_topk8_ng8_kg4_e32_h7168_i2048"

EXPECTED = {
    # ---- class 1: tampering with the checker / timer from inside the candidate's process ----------------------
    "h2_sysmodules_checker": {
        "class": 1, "needs_gpu": False, "scan": False, "definition": ATTENTION, "tell_log": False,
        "fools_today": "yes",
        "why": "`from sys import modules` -> the gate's compare module; error_stats replaced by a perfect match"},
    "h2_gc_checkers": {
        "class": 1, "needs_gpu": False, "scan": True, "definition": INDEXER, "tell_log": False,
        "fools_today": "yes (scan=False)",
        "why": "gc.get_objects() finds the CHECKERS dict; the indexer's checker becomes always-PASSED"},
    "h2_torch_function_mode": {
        "class": 1, "needs_gpu": False, "scan": False, "definition": ATTENTION, "tell_log": False,
        "fools_today": "yes",
        "why": "a TorchFunctionMode left entered at import zeroes whole-tensor bool any()/sum(): NaN/inf tests and "
               "the mismatch count read 0"},
    "h2_stats_median": {
        "class": 1, "needs_gpu": False, "scan": False, "definition": INDEXER, "tell_log": False,
        "fools_today": "yes",
        "why": "statistics.median replaced via an alias; it divides by 50 when the caller's `key` is ours"},
    "h2_json_trace": {
        "class": 1, "needs_gpu": True, "scan": False, "definition": INDEXER, "tell_log": False,
        "fools_today": "gpu-only",
        "why": "json.load wrapped: the profiler trace the bench reads has our device spans squeezed 50x"},
    "h2_pipe_forgery": {
        "class": 1, "needs_gpu": False, "scan": False, "definition": ATTENTION, "tell_log": False,
        "fools_today": "yes",
        "why": "multiprocessing Connection.send wrapped: the worker's verdict is rewritten to PASSED, 0.001 ms"},
    # ---- class 2: telling a timed call from a checked call ----------------------------------------------------
    "h2_content_cache": {
        "class": 2, "needs_gpu": False, "scan": False, "definition": ATTENTION, "tell_log": True,
        "fools_today": "yes",
        "why": "output cache keyed by 64 sampled bytes per input (content, not pointers), kept in a closure"},
    "h2_nan_sniff": {
        "class": 2, "needs_gpu": False, "scan": False, "definition": INDEXER, "tell_log": True,
        "fools_today": "yes",
        "why": "computes only when the output buffer holds the gate's poison; timed buffers are unpoisoned"},
    "h2_frame_sniff": {
        "class": 2, "needs_gpu": False, "scan": False, "definition": ATTENTION, "tell_log": True,
        "fools_today": "yes",
        "why": "traceback.walk_stack: computes only when run_candidate (gate trials, probe) is on the stack"},
    "h2_call_counter": {
        "class": 2, "needs_gpu": False, "scan": False, "definition": INDEXER, "tell_log": True,
        "fools_today": "yes",
        "why": "a closure counter that knows the schedule: honest at gate and probe positions only"},
    "h2_moe_weight_fingerprint": {
        "class": 2, "needs_gpu": False, "scan": False, "definition": MOE, "tell_log": True,
        "fools_today": "yes",
        "why": "dequantised expert weights cached under a sampled weight fingerprint; timed repeats skip dequant"},
    # ---- class 3: work the timer does not see, or the guards do not count -------------------------------------
    "h2_raw_thread": {
        "class": 3, "needs_gpu": False, "scan": False, "definition": ATTENTION, "tell_log": False,
        "fools_today": "racy (8 of 17 CPU runs PASSED; every failure was a lost race, never the thread guard)",
        "why": "_thread.start_new_thread (not counted by threading.active_count); done before the late compare"},
    "h2_work_in_reference": {
        "class": 3, "needs_gpu": False, "scan": False, "definition": INDEXER, "tell_log": False,
        "fools_today": "yes",
        "why": "sdk.definitions.reference wrapped: the deferred call is computed inside the gate's reference run"},
    "h2_profiler_sniff": {
        "class": 3, "needs_gpu": True, "scan": False, "definition": ATTENTION, "tell_log": True,
        "fools_today": "gpu-only",
        "why": "under an active profiler (CUPTI timing) launches one tiny fill kernel instead of the attention"},
    "h2_event_fallback_sidestream": {
        "class": 3, "needs_gpu": True, "scan": False, "definition": ATTENTION, "tell_log": True,
        "fools_today": "gpu-only",
        "why": "no device work under the profiler (CUDA-event fallback), then the work on a side stream events miss"},
    # ---- class 4: precomputed answers for the default seed ----------------------------------------------------
    "h2_seed0_table": {
        "class": 4, "needs_gpu": False, "scan": False, "definition": INDEXER, "tell_log": False,
        "fools_today": "yes",
        "why": "ships the reference's ids for seed 0, tiny-indexer, trials 0-2/1000-1002/1999 (2 KB, zlib)"},
    # ---- class 5: the tolerance rule -------------------------------------------------------------------------
    "h2_moe_skip_cold_experts": {
        "class": 5, "needs_gpu": False, "scan": False, "definition": MOE, "tell_log": False,
        "fools_today": "yes",
        "why": "drops the least-loaded experts while <= 9.9% of rows go wrong: matched 0.92 at rel L2 0.31 (T=12)"},
}
