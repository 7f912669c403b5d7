"""Hand-computed cases for deploy_model.py (docs/MODEL.md, "Prefill/decode disaggregation", "The
KV offload tier", "SLO goodput"), and the check that with both features off it prints exactly what
batched_model.py prints.

Run: cd tests/reference && python3 -m unittest test_deploy_model -v   (a few seconds)

Every number asserted below is computed by hand in the comments next to it, from the rules of
MODEL.md, never copied from a run.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import deploy_model  # noqa: E402
from batched_model import ceil_div as ceil  # noqa: E402

# Step costs of the hand cases: a step = 1,000 ns + 100 ns per prefill token + 500 ns per decode.
COSTS = ["--t-overhead-ns", "1000", "--t-prefill-token-ns", "100", "--t-decode-seq-ns", "500", "--t-kv-token-ns", "0"]
# 1,000 KV bytes per token: one 16-token block is 16,000 bytes.
KV = ["--kv-bytes-per-token", "1000"]


def run(lines, *args, expect_error=False, block=16):
    """Runs deploy_model.py on trace lines (ts ms, L, O, hash ids); returns its JSON (or stdout)."""
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for ts, L, O, ids in lines:
            f.write(json.dumps({"timestamp": ts, "input_length": L, "output_length": O, "hash_ids": ids}) + "\n")
        path = f.name
    try:
        p = subprocess.run(
            [sys.executable, os.path.join(HERE, "deploy_model.py"), "--trace", path, "--trace-block-size", str(block)]
            + list(args),
            capture_output=True,
            text=True,
        )
    finally:
        os.unlink(path)
    if expect_error:
        assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
        return p.stdout
    assert p.returncode == 0, (p.stdout, p.stderr)
    return json.loads(p.stdout)


def pd_args(pods, prefill, *extra, router="round-robin", bw="16000000000", lat="50"):
    return (
        ["--pods", str(pods), "--capacity", "64", "--router", router, "--prefill-pods", str(prefill)]
        + ["--pd-link-bytes-per-s", bw, "--pd-link-latency-ns", lat]
        + COSTS
        + KV
        + list(extra)
    )


class PrefillDecode(unittest.TestCase):
    def test_one_request_through_prefill_transfer_decode(self):
        # Pod 0 prefills, pod 1 decodes. L = 64 (4 blocks), O = 3, arrival 0, decider always.
        # Prefill job on pod 0: one step of 64 prefill tokens: 1,000 + 64 x 100 = 7,400 -> e_p = 7,400.
        # Transfer: ceil(64/16) x 16 x 1,000 = 64,000 bytes; alone on a 16e9 B/s link:
        #   ceil(64,000 x 10^9 / 16e9) = 4,000 ns -> completes 11,400, delivered at 11,450 (+50).
        #   transfer_ns = 11,450 - 7,400 = 4,050.
        # Decode pod 1 at 11,450: c = 63, n = 1, a prefill token (g = 0): 1,000 + 100 = 1,100
        #   -> first token 12,550 = TTFT. Then two decode steps of 1,000 + 500: finish 15,550.
        out = run([(0, 64, 3, [1, 2, 3, 4])], *pd_args(2, 1, "--pd-decider", "always"))
        (r,) = out["requests"]
        self.assertEqual(r["pod"], 1)
        self.assertEqual(r["prefill_pod"], 0)
        self.assertEqual(r["transfer_bytes"], 64_000)
        self.assertEqual(r["transfer_ns"], 4_050)
        self.assertEqual(r["ttft_ns"], 12_550)
        self.assertEqual(r["e2e_ns"], 15_550)
        self.assertEqual(r["prefill_tokens"], 65)  # 64 on the prefill pod + the recomputed last token
        self.assertEqual(r["hit_tokens"], 0)
        self.assertEqual(r["decode_hit_tokens"], 0)
        t = out["totals"]
        self.assertEqual(t["per_pod_steps"], [1, 3])
        self.assertNotIn("offload_stored_blocks", t)
        self.assertEqual(t["disaggregated"], 1)
        self.assertEqual(t["transfer_ns_max"], 4_050)
        self.assertEqual(t["makespan_ns"], 15_550)

    def test_with_the_tier_both_pods_store_the_prompt(self):
        # The same request with a 16-block CPU tier per pod: the prefill job stores k1..k4 in pod
        # 0's tier when it computes them, and the transferred request stores them in pod 1's when
        # it is admitted there (its store index starts at 0): 8 blocks stored, no load, and the
        # timings of the first case unchanged (stores cost nothing).
        out = run([(0, 64, 3, [1, 2, 3, 4])], *pd_args(2, 1, "--pd-decider", "always", "--cpu-capacity", "16"))
        t = out["totals"]
        self.assertEqual((t["offload_stored_blocks"], t["offload_loads"]), (8, 0))
        self.assertEqual((out["requests"][0]["ttft_ns"], out["requests"][0]["e2e_ns"]), (12_550, 15_550))
        self.assertEqual(out["requests"][0]["offload_hit_tokens"], 0)

    def test_ttft_grows_without_bound_as_the_link_slows(self):
        # Same request: TTFT = 7,400 + ceil(64,000 x 10^9 / BW) + 50 + 1,100.
        for bw, transfer in [(16_000_000_000, 4_000), (1_000_000_000, 64_000), (1_000_000, 64_000_000)]:
            out = run([(0, 64, 3, [1, 2, 3, 4])], *pd_args(2, 1, "--pd-decider", "always", bw=str(bw)))
            self.assertEqual(out["requests"][0]["ttft_ns"], 7_400 + transfer + 50 + 1_100, bw)

    def test_processor_sharing_on_the_decode_link(self):
        # Pods 0, 1 prefill; pod 2 decodes both. A: L = 32 (2 blocks), B: L = 64 (4 blocks), both
        # at 0, O = 1. Round-robin prefill picks: A -> pod 0, B -> pod 1.
        # e_A = 1,000 + 3,200 = 4,200; e_B = 1,000 + 6,400 = 7,400.
        # Link 4e9 B/s; work = bytes x 10^9: A 32,000e9, B 64,000e9.
        # A alone from 4,200 to 7,400: loses 3,200 x 4e9 = 12,800e9 -> 19,200e9 left.
        # B joins at 7,400: n = 2, dt = ceil(19,200e9 x 2 / 4e9) = 9,600 -> A completes at 17,000;
        #   both lose floor(9,600 x 4e9 / 2) = 19,200e9 -> B has 44,800e9 left.
        # B alone: ceil(44,800e9 / 4e9) = 11,200 -> completes 28,200 (alone it would be 23,400).
        # Deliveries (+50): A 17,050, B 28,250. transfer_ns: A 12,850, B 20,850.
        # Decode pod 2: A's step 17,050 -> 18,150; B's 28,250 -> 29,350 (1,100 each).
        out = run(
            [(0, 32, 1, [1, 2]), (0, 64, 1, [5, 6, 7, 8])],
            *pd_args(3, 2, "--pd-decider", "always", bw="4000000000"),
        )
        a, b = out["requests"]
        self.assertEqual((a["prefill_pod"], b["prefill_pod"]), (0, 1))
        self.assertEqual((a["pod"], b["pod"]), (2, 2))
        self.assertEqual((a["queue_len"], b["queue_len"]), (0, 1))  # A is in flight to pod 2
        self.assertEqual((a["transfer_ns"], b["transfer_ns"]), (12_850, 20_850))
        self.assertEqual((a["ttft_ns"], b["ttft_ns"]), (18_150, 29_350))
        self.assertEqual((a["e2e_ns"], b["e2e_ns"]), (18_150, 29_350))
        self.assertEqual(out["totals"]["transfer_bytes"], 96_000)

    def test_link_rounding_by_hand(self):
        # 3 B/s. X and Y (1 byte each) join at 0: dt = ceil(10^9 x 2 / 3) = 666,666,667 and each
        # loses floor(666,666,667 x 3 / 2) = 10^9: both complete at 666,666,667.
        lk = deploy_model.Link(3)
        x, y, z = (deploy_model.Req(i, 0, 16, 1, []) for i in range(3))
        self.assertEqual(lk.join(0, x, 10**9), [])
        self.assertEqual(lk.join(0, y, 10**9), [])
        self.assertEqual(lk.next_completion(), 666_666_667)
        self.assertEqual(lk.advance(666_666_667), [(666_666_667, x), (666_666_667, y)])
        # Again, with Z (2 bytes) joining at 10^8: X, Y lose floor(10^8 x 3 / 2) = 1.5e8 -> 8.5e8
        # left; n = 3: dt = ceil(8.5e8 x 3 / 3) = 8.5e8 -> X, Y complete at 9.5e8; Z has
        # 2e9 - 8.5e8 = 1.15e9 left, alone: ceil(1.15e9 / 3) = 383,333,334 -> 1,333,333,334
        # (continuous processor sharing: 0.95 s and 1.3333... s).
        lk = deploy_model.Link(3)
        lk.join(0, x, 10**9)
        lk.join(0, y, 10**9)
        self.assertEqual(lk.join(10**8, z, 2 * 10**9), [])
        self.assertEqual(lk.next_completion(), 950_000_000)
        self.assertEqual(lk.advance(950_000_000), [(950_000_000, x), (950_000_000, y)])
        self.assertEqual(lk.next_completion(), 1_333_333_334)

    def test_integer_link_stays_within_a_nanosecond_per_event_of_exact_sharing(self):
        # Random joins on one link, against processor sharing computed exactly in rationals: the
        # integer rule completes each transfer no earlier than exact sharing, and later by at most
        # 1 ns per completion (the ceil of dt) plus, per join, n / BW ns for the n work units of
        # 10^-9 byte the floors may drop (BW bytes/s = BW units/ns): here 12 + 12 x 12 / BW.
        from fractions import Fraction

        x = 7
        for trial in range(30):
            bw = 1 + trial * 7_919_777
            joins, t = [], 0
            for i in range(12):
                x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
                t += (x >> 40) % 50_000
                joins.append((t, 1 + (x >> 20) % 200_000))  # (join ns, bytes)
            # integer rule
            lk, got = deploy_model.Link(bw), {}
            reqs = [deploy_model.Req(i, 0, 16, 1, []) for i in range(len(joins))]
            for (tj, nbytes), r in zip(joins, reqs):
                while lk.next_completion() <= tj:
                    got.update((q.idx, y) for y, q in lk.advance(lk.next_completion()))
                got.update((q.idx, y) for y, q in lk.join(tj, r, nbytes * 10**9))
            while lk.active:
                got.update((q.idx, y) for y, q in lk.advance(lk.next_completion()))
            # exact sharing, in seconds as fractions
            exact, active, now = {}, {}, Fraction(0)
            events = [(Fraction(tj, 10**9), i, nbytes) for i, (tj, nbytes) in enumerate(joins)] + [(None, None, None)]
            for tj, i, nbytes in events:
                while active:
                    rate = Fraction(bw, len(active))
                    k = min(active, key=lambda j: (active[j], j))
                    done_at = now + active[k] / rate
                    if tj is not None and done_at > tj:
                        break
                    for j in active:
                        active[j] -= rate * (done_at - now)
                    now = done_at
                    for j in [j for j in active if active[j] <= 0]:
                        exact[j] = now
                        del active[j]
                if tj is None:
                    break
                if active:
                    rate = Fraction(bw, len(active))
                    for j in active:
                        active[j] -= rate * (tj - now)
                now = tj
                active[i] = Fraction(nbytes)
            self.assertEqual(sorted(got), list(range(12)))
            for i in range(12):
                exact_ns = exact[i] * 10**9
                self.assertGreaterEqual(got[i], exact_ns, (trial, i))
                self.assertLessEqual(got[i] - exact_ns, 12 + Fraction(144, bw), (trial, i))

    def test_prefix_threshold_skips_the_transfer_when_the_decode_pod_holds_the_prefix(self):
        # Pod 0 prefills, pod 1 decodes; decider prefix-threshold, N_T = 16 (default).
        # A at 0: L = 64, ids 1..4, O = 1. Pod 1 holds nothing: 64 - 0 >= 16 -> disaggregated.
        #   As in the first case: TTFT = 12,550. Pod 1 caches A's 4 prompt blocks.
        # B at 1 ms: L = 72, ids 1..5 (4 full blocks: keys of ids 1..4). Pod 1 holds all 4:
        #   72 - 64 = 8 < 16 -> decoded locally on pod 1: hit h = min(4, floor(71/16)) = 4,
        #   c = 64, 8 prefill tokens: 1,000 + 800 = 1,800 = TTFT; no prefill pod, no transfer.
        # C at 2 ms: L = 80, ids 1, 2, 3, 4, 6 (5 blocks; the 5th is new): match 4, 80 - 64 = 16 >= 16
        #   -> disaggregated (llm-d's >=; BLIS's strict > would not). Prefill pod 0 still caches A's
        #   blocks: h = min(5, floor(79/16)) = 4 -> 64 hit tokens, 16 prefill tokens:
        #   1,000 + 1,600 = 2,600 -> e_p = 2,002,600. Transfer: 5 blocks = 80,000 bytes = 5,000 ns
        #   + 50 -> delivered 2,007,650 (transfer_ns 5,050). Pod 1: h = 4 (decode_hit 64), c = 79,
        #   one token: 1,100 -> 2,008,750: TTFT 8,750. prefill tokens 16 + 1 = 17.
        out = run(
            [(0, 64, 1, [1, 2, 3, 4]), (1, 72, 1, [1, 2, 3, 4, 5]), (2, 80, 1, [1, 2, 3, 4, 6])],
            *pd_args(2, 1),
        )
        a, b, c = out["requests"]
        self.assertEqual((a["prefill_pod"], a["ttft_ns"]), (0, 12_550))
        self.assertEqual(b["prefill_pod"], None)
        self.assertEqual(b["transfer_bytes"], 0)
        self.assertEqual(b["transfer_ns"], None)
        self.assertEqual((b["hit_tokens"], b["prefill_tokens"], b["ttft_ns"]), (64, 8, 1_800))
        self.assertEqual(c["prefill_pod"], 0)
        self.assertEqual((c["hit_tokens"], c["decode_hit_tokens"]), (64, 64))
        self.assertEqual((c["transfer_ns"], c["ttft_ns"], c["prefill_tokens"]), (5_050, 8_750, 17))
        self.assertEqual(out["totals"]["disaggregated"], 2)
        # With N_T = 17, C's 16 uncached tokens stay on the decode pod: pod 1 hits 4 blocks,
        # computes 16 tokens: 1,000 + 1,600 = 2,600 = TTFT.
        out = run(
            [(0, 64, 1, [1, 2, 3, 4]), (1, 72, 1, [1, 2, 3, 4, 5]), (2, 80, 1, [1, 2, 3, 4, 6])],
            *pd_args(2, 1, "--pd-threshold-tokens", "17"),
        )
        c = out["requests"][2]
        self.assertEqual((c["prefill_pod"], c["ttft_ns"], c["hit_tokens"]), (None, 2_600, 64))

    def test_slo_goodput_is_inclusive(self):
        # The first case: TTFT 12,550 ns, E2E 15,550, O' = 3 -> TPOT = 3,000 / 2 = 1,500 ns.
        base = pd_args(2, 1, "--pd-decider", "always")
        for ttft, tpot, good in [
            ("0.01255", "0.0015", 1),
            ("0.012549", "0.0015", 0),
            ("0.01255", "0.001499", 0),
            ("1", None, 1),
        ]:
            extra = ["--slo-ttft-ms", ttft] + (["--slo-tpot-ms", tpot] if tpot else [])
            t = run([(0, 64, 3, [1, 2, 3, 4])], *base, *extra)["totals"]
            self.assertEqual(t["slo_good_requests"], good, (ttft, tpot))
            self.assertEqual(t["goodput_req_per_s"], good / 15_550e-9)


def tier_args(*extra, pods=1, cap=8, router="round-robin", bw="16000000000"):
    return (
        ["--pods", str(pods), "--capacity", str(cap), "--router", router, "--cpu-capacity", "16"]
        + ["--pcie-bytes-per-s", bw, "--pcie-latency-ns", "100"]
        + COSTS
        + KV
        + list(extra)
    )


# A: ids 1..4 (stored in the tier), B: 8 new blocks that evict A's from the 8-block GPU, C: A's prompt.
A = (0, 64, 1, [1, 2, 3, 4])
B_ = (1, 128, 1, list(range(11, 19)))
C_ = (2, 64, 1, [1, 2, 3, 4])


class OffloadTier(unittest.TestCase):
    def test_a_cpu_hit_reloads_and_lowers_ttft(self):
        # One pod, C = 8, C2 = 16; PCIe 16e9 B/s (1,000 ns per 16,000-byte block) + 100 ns.
        # A at 0: 64 tokens, 7,400 ns; stores k1..k4 in the tier. Released: GPU free queue
        #   = [4, 5, 6, 7, 3, 2, 1, 0] (A's blocks last, reverse order).
        # B at 1 ms: 128 tokens, 8 new blocks: pops all 8, so A's keys leave the GPU; stores 8 keys
        #   (tier: 12 of 16). 1,000 + 12,800 = 13,800.
        # C at 2 ms (A's prompt): GPU hit 0; h_max = min(4, floor(63/16)) = 3, so the CPU hit is
        #   h2 = 3 (k1..k3). Admitted loading: 3 blocks, c = 48, load 48,000 bytes: 3,000 + 100 ->
        #   x = 2,003,100. Nothing else to schedule: the pod waits until x.
        #   Step at 2,003,100: 16 prefill tokens, 1 new block: 2,600 -> TTFT = 3,100 + 2,600 = 5,700
        #   (without the tier: 64 tokens, 7,400).
        out = run([A, B_, C_], *tier_args())
        a, b, c = out["requests"]
        self.assertEqual((a["ttft_ns"], b["ttft_ns"]), (7_400, 13_800))
        self.assertEqual((c["hit_tokens"], c["offload_hit_tokens"], c["prefill_tokens"]), (0, 48, 16))
        self.assertEqual(c["ttft_ns"], 5_700)
        t = out["totals"]
        self.assertEqual((t["offload_loads"], t["offload_load_blocks"]), (1, 3))
        # stores: A 4, B 8, C none (k4, its 4th block, is already in the tier)
        self.assertEqual(t["offload_stored_blocks"], 12)
        self.assertEqual(t["steps"], 3)  # the wait is no step
        # pinned-block integral: A 4 x 7,400 + B 8 x 13,800 + C's wait 3 x 3,100 + C 4 x 2,600
        #   = 29,600 + 110,400 + 9,300 + 10,400 = 159,700 over C x makespan = 8 x 2,005,700.
        self.assertEqual(t["makespan_ns"], 2_005_700)
        self.assertAlmostEqual(t["per_pod_kv_util_mean"][0], 159_700 / (8 * 2_005_700), places=15)
        self.assertEqual(t["per_pod_kv_util_peak"][0], 1.0)
        # Without the tier, C recomputes its prompt.
        off = run([A, B_, C_], "--pods", "1", "--capacity", "8", "--router", "round-robin", *COSTS)
        self.assertEqual(off["requests"][2]["ttft_ns"], 7_400)
        self.assertNotIn("offload_hit_tokens", off["requests"][2])

    def test_the_reload_never_pays_when_pcie_is_slow(self):
        # PCIe 1e6 B/s: the load takes 48,000 x 10^9 / 10^6 = 48,000,000 ns (+100): TTFT
        # 48,000,100 + 2,600 = 48,002,700, far worse than recomputing (7,400).
        out = run([A, B_, C_], *tier_args(bw="1000000"))
        self.assertEqual(out["requests"][2]["ttft_ns"], 48_002_700)

    def test_an_arrival_runs_while_a_load_is_under_way(self):
        # As above, plus D at 2 ms, after C in the file: ids 21, 22, L = 32, O = 1.
        # Step at 2 ms: C admitted loading (no budget, x = 2,003,100), and admission goes on past a
        #   loading request: D, 32 tokens, 2 blocks (5 free): 1,000 + 3,200 = 4,200 -> D's TTFT
        #   4,200; the step ends at 2,004,200 > x.
        # Next step at 2,004,200: C is ready; 16 tokens: 2,600 -> 2,006,800: C's TTFT 6,800 (its
        #   load overlapped D's step; it waits for the step boundary, as in vLLM).
        D = (2, 32, 1, [21, 22])
        out = run([A, B_, C_, D], *tier_args())
        c, d = out["requests"][2], out["requests"][3]
        self.assertEqual(d["ttft_ns"], 4_200)
        self.assertEqual(c["ttft_ns"], 6_800)
        self.assertEqual(out["totals"]["steps"], 4)
        # pinned integral: 29,600 + 110,400 + (C 3 + D 2) x 4,200 + C 4 x 2,600 = 171,400
        self.assertAlmostEqual(
            out["totals"]["per_pod_kv_util_mean"][0], 171_400 / (8 * 2_006_800), places=15
        )

    def test_a_waiting_pod_wakes_for_an_arrival(self):
        # C's load is made long (PCIe 16e6 B/s: 48,000 x 10^9 / 16e6 = 3,000,000 ns + 100 ->
        # x = 5,000,100) and D arrives at 3 ms, while the pod waits: D runs at once,
        # 3,000,000 -> 3,004,200 (TTFT 4,200); C at x: 2,600 -> TTFT 3,000,100 + 2,600 = 3,002,700.
        D = (3, 32, 1, [21, 22])
        out = run([A, B_, C_, D], *tier_args("--coverage", bw="16000000"))
        self.assertEqual(out["totals"]["coverage"]["wake"], 1)
        self.assertEqual(out["totals"]["coverage"]["wait"], 2)  # at 2 ms, and after D's step
        c, d = out["requests"][2], out["requests"][3]
        self.assertEqual(d["ttft_ns"], 4_200)
        self.assertEqual(c["ttft_ns"], 3_002_700)

    def test_a_loading_request_preempted_reloads_after_the_first_load(self):
        # One pod, C = 5, C2 = 16, PCIe 16e6 B/s (a 2-block load: 32,000 x 10^9 / 16e6 = 2,000,000
        # ns, + 100).
        # A at 0: ids 1..3, 48 tokens: blocks 0, 1, 2; stored k1..k3; free [3, 4, 2, 1, 0].
        # B at 1 ms: ids 21..25, 80 tokens, 5 blocks: takes all, evicting k1..k3 from the GPU.
        # X at 2 ms: ids 31, 32, L = 32, O = 20 (at most ceil(51/16) = 4 blocks). Y at 2 ms after it:
        #   A's prompt, O = 1.
        # Step at 2 ms: X admitted (2 blocks, 32 tokens); Y: GPU hit 0, h_max = 2, CPU hit k1, k2:
        #   loading, 2 blocks, x = 2,000,000 + 2,000,100 = 4,000,100; free: 1 block. The step:
        #   1,000 + 3,200 -> 2,004,200 (X's TTFT 4,200).
        # X decodes (1,500 per step), taking the last free block at c + n = 33. At c = 48 (the 17th
        #   decode step, at 2,004,200 + 16 x 1,500 = 2,028,200) it needs a 4th block: none free, so
        #   the last of R, Y (still loading), is preempted: its 2 blocks freed, c = 0, to W.
        # The next two steps (2,029,700 and 2,031,200) try Y again: CPU hit 2 but 1 block free:
        #   blocked. X finishes at 2,031,200 + 1,500 = 2,032,700 (19 decode steps: E2E 32,700).
        # Step at 2,032,700: Y admitted loading again; the first load still holds the link until
        #   4,000,100 (no cancellation), so x = 4,000,100 + 2,000,100 = 6,000,200; nothing scheduled:
        #   the pod waits (no step counted).
        # Step at 6,000,200: Y ready, 16 tokens, 1 new block: 2,600 -> 6,002,800: TTFT 4,002,800.
        lines = [A, (1, 80, 1, [21, 22, 23, 24, 25]), (2, 32, 20, [31, 32]), (2, 48, 1, [1, 2, 3])]
        out = run(lines, *tier_args("--coverage", cap=5, bw="16000000"))
        x, y = out["requests"][2], out["requests"][3]
        self.assertEqual((x["ttft_ns"], x["e2e_ns"], x["preemptions"]), (4_200, 32_700, 0))
        self.assertEqual((y["hit_tokens"], y["offload_hit_tokens"], y["preemptions"]), (0, 32, 1))
        self.assertEqual((y["ttft_ns"], y["prefill_tokens"]), (4_002_800, 16))
        t = out["totals"]
        self.assertEqual((t["offload_loads"], t["offload_load_blocks"], t["preemptions"]), (2, 4, 1))
        self.assertEqual(t["steps"], 1 + 1 + 20 + 1)
        cov = t["coverage"]
        self.assertEqual((cov["preempt_loading"], cov["load_blocked"], cov["wait"]), (1, 2, 1))

    def test_tiered_match_weights(self):
        # llm-d's LongestPrefixScorer: GPU blocks weigh 1.0, CPU blocks 0.8, match truncated.
        cfg = {"C2": 16, "w_cpu": 800}
        pod = deploy_model.Pod(0, 4, cfg, (1, 0, 0, 0))
        keys = list(range(100, 112))
        pod.cache = {keys[0]: 0, keys[1]: 1}  # two GPU blocks
        for k in keys[2:10]:
            pod.cpu[k] = None  # eight CPU blocks, then keys[10] is missing
        pod.cpu[keys[11]] = None
        # 2 x 1.0 + 8 x 0.8 = 8.4 -> 8; unweighted run: 10
        self.assertEqual(pod.weighted_match(keys), 8)
        self.assertEqual(pod.unweighted_match(keys), 10)
        # ten CPU blocks of 0.8: exactly 8 in thousandths (llm-d's binary64 sum truncates to 7)
        pod.cache = {}
        for k in keys[:10]:
            pod.cpu[k] = None
        self.assertEqual(pod.weighted_match(keys), 8)
        pod.cfg = {"C2": 16, "w_cpu": 0}
        self.assertEqual(pod.weighted_match(keys), 0)

    def test_tiered_routing(self):
        # Two pods, prefix-aware, alpha 1. A (ids 1..4) at 0: no match, equal queues -> pod 0
        #   (lowest index); its keys go to pod 0's tier. E (ids 31..38, 8 blocks) at 1 ms: no match
        #   anywhere, queues 0 -> pod 0, whose 8 GPU blocks it takes all: A's keys leave pod 0's
        #   GPU and stay in its tier.
        # C (A's prompt) at 2 ms: pod 0 holds k1..k4 in the tier only: floor(4 x 0.8) = 3; pod 1: 0
        #   -> pod 0, where it loads h2 = 3 blocks.
        E = (1, 128, 1, list(range(31, 39)))
        out = run([A, E, C_], *tier_args(pods=2, router="prefix-aware"))
        self.assertEqual([r["pod"] for r in out["requests"]], [0, 0, 0])
        self.assertEqual(out["requests"][2]["offload_hit_tokens"], 48)
        # F (ids 41, 42, O = 60) at 2 ms before C keeps pod 0 busy: queue_len(0) = 1 when C is
        # routed. Weight 0.8: pod 0 scores 3 - 1 = 2 > pod 1's 0 -> pod 0. Weight 0.2:
        # floor(0.8) = 0 -> 0 - 1 < 0 -> pod 1.
        F = (2, 32, 60, [41, 42])
        for w, pod in [("0.8", 0), ("0.2", 1)]:
            out = run([A, E, F, C_], *tier_args("--cpu-tier-weight", w, pods=2, router="prefix-aware"))
            self.assertEqual(out["requests"][3]["pod"], pod, w)


class FeaturesOff(unittest.TestCase):
    """With --prefill-pods 0 and --cpu-capacity 0, deploy_model.py prints batched_model.py's bytes."""

    @classmethod
    def setUpClass(cls):
        if shutil.which("zstd") is None:
            raise AssertionError("zstd (the command) is needed to read the vendored traces")
        cls.tmp = tempfile.mkdtemp()
        cls.heads = {}
        for name, n in [("conversation_trace", 150), ("synthetic_trace", 250)]:
            text = subprocess.run(
                ["zstd", "-dc", os.path.join(REPO, "traces", f"{name}.jsonl.zst")],
                capture_output=True,
                check=True,
                text=True,
            ).stdout
            path = os.path.join(cls.tmp, f"{name}.jsonl")
            with open(path, "w") as f:
                f.write("\n".join(text.splitlines()[:n]) + "\n")
            cls.heads[name] = path

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def same(self, name, args):
        outs = []
        for model in ("batched_model.py", "deploy_model.py"):
            p = subprocess.run(
                [sys.executable, os.path.join(HERE, model), "--trace", self.heads[name]] + args,
                capture_output=True,
                text=True,
            )
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            outs.append(p.stdout)
        self.assertEqual(outs[0], outs[1], (name, args))
        return json.loads(outs[0])

    def test_conversation_head(self):
        out = self.same("conversation_trace", ["--pods", "2", "--capacity", "8000", "--router", "prefix-aware"])
        self.assertEqual(len(out["requests"]), 150)
        self.assertGreater(out["totals"]["preemptions"], 0)
        self.assertGreater(out["totals"]["hit_tokens"], 0)

    def test_synthetic_head(self):
        args = ["--pods", "2", "--capacity", "9000", "--router", "round-robin"]
        out = self.same("synthetic_trace", args + ["--max-num-batched-tokens", "2048", "--max-num-seqs", "64"])
        self.assertEqual(len(out["requests"]), 250)
        self.assertGreater(out["totals"]["preemptions"], 0)

    def test_explicit_zeros_change_nothing(self):
        # --cpu-capacity 0 and --prefill-pods 0 given explicitly: still batched_model.py's bytes.
        args = ["--pods", "2", "--capacity", "8000", "--router", "least-loaded"]
        ref = subprocess.run(
            [sys.executable, os.path.join(HERE, "batched_model.py"), "--trace", self.heads["conversation_trace"]] + args,
            capture_output=True,
            text=True,
        ).stdout
        ours = subprocess.run(
            [sys.executable, os.path.join(HERE, "deploy_model.py"), "--trace", self.heads["conversation_trace"]]
            + args
            + ["--cpu-capacity", "0", "--prefill-pods", "0"],
            capture_output=True,
            text=True,
        ).stdout
        self.assertTrue(ref.startswith('{"requests"'))
        self.assertEqual(ref, ours)


class Qualitative(unittest.TestCase):
    """The issue's P/D checks, with the default profile (qwen3-32b-h100x2: a step costs 12.6 ms +
    61 us per prefill token + 67 us per decode) and the default link (25 GB/s, 256 KiB per token):
    not hand-computed, but each outcome follows from the costs as the comments say."""

    @staticmethod
    def lines(n, gap_us, L, O):
        # one request every gap_us (whole ms), unique prompts (no cache hit anywhere)
        return [(i * gap_us // 1000, L, O, [10**6 + 1000 * i + j for j in range(ceil(L, 16))]) for i in range(n)]

    def goodput(self, lines, tpot_ms, *extra):
        out = run(
            lines, "--pods", "4", "--capacity", "20000", "--router", "least-loaded",
            "--slo-ttft-ms", "3000", "--slo-tpot-ms", tpot_ms, *extra,
        )
        return out["totals"]["slo_good_requests"], out["totals"]["goodput_req_per_s"]

    def test_pd_wins_on_long_prompts_with_short_outputs_under_a_tight_tpot(self):
        # 8,000-token prompts every 250 ms, 64 output tokens, TPOT SLO 20 ms. Aggregated, a decode
        # sharing a step with another request's 8,000-token prefill waits ~0.5 s for that token,
        # which pushes the request's TPOT (~12.7 ms alone) past 20 ms; on 2 prefill + 2 decode
        # pods the decode steps carry no prefill, at the price of ~0.1 s more TTFT (transfer and
        # the decode pod's first step).
        lines = self.lines(40, 250_000, 8000, 64)
        agg_good, agg = self.goodput(lines, "20")
        pd_good, pd = self.goodput(lines, "20", "--prefill-pods", "2", "--pd-decider", "always")
        self.assertEqual(pd_good, 40)
        self.assertLess(agg_good, 20)
        self.assertGreater(pd, 2 * agg)

    def test_pd_loses_on_short_prompts(self):
        # 128-token prompts every 12.5 ms (200 of them), 256 output tokens each, TPOT SLO 17 ms: the
        # work is decode, and nearly all 200 run at once. Aggregated, 4 pods share them (~50 running
        # each: 12.6 ms + 50 x 67 us ~ 16 ms a step; TPOT p90 16.5 ms when this was written); P/D
        # leaves them to 2 decode pods (~100 each: ~19 ms; TPOT p10 17.4 ms) while the 2 prefill
        # pods idle between 128-token prefills.
        lines = self.lines(200, 12_500, 128, 256)
        agg_good, agg = self.goodput(lines, "17")
        pd_good, pd = self.goodput(lines, "17", "--prefill-pods", "2", "--pd-decider", "always")
        self.assertGreater(agg_good, 180)
        self.assertLess(pd_good, 20)
        self.assertLess(pd, agg)


class Invariants(unittest.TestCase):
    def test_mixed_trace_runs_to_completion_under_pressure(self):
        # A pseudo-random mix (shared prefixes, partial blocks, equal timestamps) on tight pods with
        # both features on and --check (block invariants after every step): every request
        # finishes, and the rarer rules are reached (--coverage: branches taken): a loading request
        # preempted, a pod waiting for a load, transfers sharing a link, a CPU hit that does not fit.
        x, ts, lines = 11, 0, []
        for i in range(120):
            x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
            if x >> 60 < 10:
                ts += (x >> 40) % 8
            family, depth = (x >> 20) % 4, (x >> 30) % 7
            ids = [family * 100 + d for d in range(depth)] + [10_000 + 3 * i, 10_001 + 3 * i]
            L = max(16 * (depth + 2) - (x >> 50) % 17, 1)
            lines.append((ts, L, (x >> 8) % 40, ids))
        seen = {}
        for extra in (["--prefill-pods", "1"], ["--prefill-pods", "2", "--pd-decider", "always"], []):
            out = run(
                lines,
                "--pods", "3", "--capacity", "12", "--router", "prefix-aware", "--cpu-capacity", "20",
                "--max-num-batched-tokens", "40", "--max-num-seqs", "4", "--check", "--coverage",
                "--pcie-bytes-per-s", "100000000", "--pd-link-bytes-per-s", "1000000000",
                *COSTS, *KV, *extra,
            )
            t = out["totals"]
            self.assertEqual(t["requests"], 120)
            self.assertGreater(t["offload_loads"], 0, extra)
            self.assertGreater(t["preemptions"], 0, extra)
            for r in out["requests"]:
                self.assertGreaterEqual(r["e2e_ns"], r["ttft_ns"])
                self.assertGreater(r["ttft_ns"], 0)
            for k, v in t["coverage"].items():
                seen[k] = seen.get(k, 0) + v
        for branch in ["preempt", "preempt_loading", "self_preempt", "wait", "skip_loading", "load_blocked",
                       "shared_link", "transferred_admission", "transferred_blocked", "tier_full"]:
            self.assertGreater(seen.get(branch, 0), 0, branch)


class RejectedInputs(unittest.TestCase):
    def test_bad_flags_and_requests_exit_2(self):
        one = [(0, 64, 1, [1, 2, 3, 4])]
        base = ["--pods", "2", "--capacity", "8", "--router", "round-robin"]
        self.assertIn("--prefill-pods", run(one, *base, "--prefill-pods", "2", expect_error=True))
        self.assertIn("--pd-link-bytes-per-s", run(one, *base, "--prefill-pods", "1", "--pd-link-bytes-per-s", "0", expect_error=True))
        self.assertIn("--cpu-tier-weight", run(one, *base, "--cpu-tier-weight", "0.8001", expect_error=True))
        self.assertIn("--slo-ttft-ms", run(one, *base, "--slo-ttft-ms", "-1", expect_error=True))
        # 4 prompt blocks do not fit a 3-block prefill pod: the line is named
        msg = run(one, *base, "--prefill-pods", "1", "--prefill-capacity", "3", expect_error=True)
        self.assertTrue(msg.startswith("ERROR line=1:") and "--prefill-capacity" in msg, msg)


if __name__ == "__main__":
    unittest.main()
