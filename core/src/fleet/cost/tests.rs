//! The cost model against hand-computed values (the arithmetic is in the comments).

use super::shape::window_pairs;
use super::*;

/// A tiny dense model whose terms are easy to compute by hand: L = 2, d = 64, H = 4, 2 KV heads
/// of 16, MLP 128, vocab 1000.
const TINY: ModelDesc = ModelDesc {
    layers: 2,
    hidden: 64,
    heads: 4,
    kv_heads: 2,
    head_dim: 16,
    intermediate: 128,
    vocab: 1000,
    tied_embeddings: false,
    qk_norm: false,
    attention_bias: false,
    attention_sinks: false,
    weight_dtype: Dtype::Bf16,
    kv_dtype: Dtype::Bf16,
    moe: None,
    mla: None,
    sliding: None,
    extra_params: 0,
};

/// 1 TFLOP/s, 1 GB/s of HBM and link, 1 GB of memory.
const SLOW: Hardware = Hardware {
    flops_bf16: 1_000_000_000_000,
    flops_fp8: 0,
    flops_fp4: 0,
    hbm_bytes_per_s: 1_000_000_000,
    memory_bytes: 1_000_000_000,
    link_bytes_per_s: 1_000_000_000,
    pcie_bytes_per_s: 1_000_000_000,
};

/// Every efficiency 50%, overheads 1000 ns per step, 100 per request, 10 per layer.
const HALF: Calibration = Calibration {
    compute_ppm: 500_000,
    moe_ppm: 500_000,
    attention_ppm: 500_000,
    memory_ppm: 500_000,
    kv_memory_ppm: 0,
    shared_kv_read_ppm: 1_000_000,
    link_ppm: 500_000,
    step_ns: 1_000,
    request_ns: 100,
    layer_ns: 10,
    allreduce_ns: 0,
    reserve_bytes: 1_000_000,
    gpu_memory_utilization_ppm: 900_000,
};

#[test]
fn parameter_counts_match_the_published_configs() {
    // research-24 §1.2, computed from the configs (and within the published "8B", "70B", "32.8B",
    // "116.8B", "671B")
    assert_eq!(Model::Llama31_8b.desc().params(), 8_030_261_248);
    assert_eq!(Model::Llama31_70b.desc().params(), 70_553_706_496);
    assert_eq!(Model::Qwen3_8b.desc().params(), 8_190_735_360);
    assert_eq!(Model::Qwen3_32b.desc().params(), 32_762_123_264);
    // CodeLlama-34B ("33.7B"): 48 x (attention 8192 x 8192 x 2 + 2 x 8192 x 1024 = 150,994,944;
    // MLP 3 x 8192 x 22016 = 541,065,216; two norms 16,384) + embedding and head 2 x 32000 x 8192
    // + final norm 8192
    assert_eq!(Model::CodeLlama34b.desc().params(), 48 * 692_076_544 + 2 * 262_144_000 + 8192);
    assert_eq!(Model::CodeLlama34b.desc().params(), 33_743_970_304);
    assert_eq!(Model::GptOss120b.desc().params(), 116_829_156_672);
    assert_eq!(Model::DeepseekV3.desc().params(), 671_026_419_200);
    // bf16: two bytes each
    assert_eq!(Model::Qwen3_32b.desc().weight_bytes(), 65_524_246_528);
    assert_eq!(Model::Llama31_70b.desc().weight_bytes(), 141_107_412_992);
    // gpt-oss: 114,661,785,600 expert weights at 4.25 bits + 2,167,371,072 others at 16 bits
    assert_eq!(Model::GptOss120b.desc().all_routed_expert_params(), 114_661_785_600);
    assert_eq!(Model::GptOss120b.desc().weight_bytes(), 60_914_073_600 + 4_334_742_144);
    // per token: 36 x (attention 11,796,480 + router 368,640) + 4 experts x 36 x 24,883,200
    assert_eq!(Model::GptOss120b.desc().dense_active_params(), 968_785_920);
    assert_eq!(Model::GptOss120b.desc().routed_active_params(), 3_583_180_800);
    // one expert: 3 x 2880 x 2880 x 17 / 32 bytes
    assert_eq!(Model::GptOss120b.desc().expert_bytes(), 13_219_200);
}

#[test]
fn kv_bytes_per_token_follow_vllm() {
    let per_token = |m: Model, tp: u32| m.desc().kv_bytes_per_token_layer(tp) * m.desc().layers as u128;
    // 2 x 64 layers x (8 / 2) heads x 128 x 2 bytes
    assert_eq!(per_token(Model::Qwen3_32b, 2), 131_072);
    // 2 x 80 x (8 / 4) x 128 x 2
    assert_eq!(per_token(Model::Llama31_70b, 4), 81_920);
    // 8 KV heads on 16 GPUs: replicated, one head per GPU
    assert_eq!(per_token(Model::Llama31_70b, 16), 2 * 80 * 128 * 2);
    // MLA: 61 x (512 + 64) x 2, on every rank
    assert_eq!(per_token(Model::DeepseekV3, 1), 70_272);
    assert_eq!(per_token(Model::DeepseekV3, 8), 70_272);
}

#[test]
fn window_pairs_by_hand() {
    // keys 1, 2, 3, 4, 5
    assert_eq!(window_pairs(0, 5, 0), Some(15));
    // keys 1, 2, 3, 3, 3
    assert_eq!(window_pairs(0, 5, 3), Some(12));
    // keys 3, 3 (c = 5 is past the window)
    assert_eq!(window_pairs(5, 2, 3), Some(6));
    // keys 2, 3 (within the window)
    assert_eq!(window_pairs(1, 2, 10), Some(5));
    // keys 3, 4, 4, 4
    assert_eq!(window_pairs(2, 4, 4), Some(15));
    for c in 0..20u64 {
        for t in 1..20u64 {
            for w in 1..25u64 {
                let brute: u128 = (0..t).map(|i| (c + i + 1).min(w) as u128).sum();
                assert_eq!(window_pairs(c, t, w), Some(brute), "c {c} t {t} w {w}");
            }
        }
    }
}

#[test]
fn shape_accumulates_prefill_and_decode() {
    let mut s = BatchShape::new(4);
    s.add_prefill(2, 4).unwrap(); // keys 3, 4, 5, 6 (full) / 3, 4, 4, 4 (window)
    s.add_decode(10).unwrap(); // 11 keys / 4
    s.add_decode(1).unwrap(); // 2 keys / 2
    assert_eq!((s.prefill_requests, s.prefill_tokens, s.prefill_pairs, s.prefill_pairs_window), (1, 4, 18, 15));
    assert_eq!((s.prefill_cached, s.prefill_cached_window), (2, 2));
    assert_eq!((s.decode_requests, s.decode_cached, s.decode_cached_window, s.decode_pairs_window), (2, 11, 5, 6));
    assert_eq!((s.requests(), s.tokens()), (3, 6));
    let mut many = BatchShape::new(4);
    many.add_decodes(3, 10).unwrap();
    let mut one_by_one = BatchShape::new(4);
    for _ in 0..3 {
        one_by_one.add_decode(10).unwrap();
    }
    assert_eq!(many, one_by_one);
    let mut big = BatchShape::new(0);
    assert_eq!(
        big.add_prefill(u64::MAX, 2),
        Err(Error::Overflow { what: CostQuantity::BatchShape }),
        "pairs overflow is an error, not a wrap"
    );
}

/// One 8-token prefill from empty and one decode with 4 cached tokens, on TINY at tp = 1.
fn tiny_batch() -> BatchShape {
    let mut s = BatchShape::new(0);
    s.add_prefill(0, 8).unwrap();
    s.add_decode(4).unwrap();
    s
}

#[test]
fn step_terms_by_hand_tp1() {
    let p = Physics::new(TINY, SLOW, 1, HALF).unwrap();
    let t = p.step_terms(&tiny_batch()).unwrap();
    // matrices per layer: attention 64x64 + 2x64x32 + 64x64 = 12,288, MLP 3x64x128 = 24,576;
    // 2 layers: 73,728 params, 147,456 FLOP per token; T = 9 tokens: 1,327,104 FLOP at
    // 1e12 x 0.5 = 2,654.208 ns -> 2,654; logits 2 x 1000 x 64 x R = 2 requests: 256,000 FLOP ->
    // 512 ns
    assert_eq!(t.gemm_ns, 2_654 + 512);
    // weights: params 64,000 x 2 (embedding, head) + 2 x (36,864 + 128 norms) + 64 = 202,048,
    // 404,096 bytes, less the embedding table 128,000 = 276,096 bytes at 5e8 B/s = 552,192 ns
    assert_eq!(t.weights_ns, 552_192);
    assert_eq!(t.linear_ns, 552_192);
    // prefill: 36 pairs x 2 layers x 2 x (16 + 16) x 4 heads = 18,432 FLOP -> 36.864 ns; KV
    // 2 x 2 heads x 16 x 2 B = 128 B per token and layer, 8 tokens x 2 layers = 2,048 B -> 4,096 ns
    assert_eq!(t.prefill_attention_ns, 4_096);
    // decode: 5 keys x 2 layers x 256 = 2,560 FLOP -> 5 ns; KV (4 + 1) x 2 x 128 = 1,280 B -> 2,560
    assert_eq!(t.decode_attention_ns, 2_560);
    assert_eq!(t.allreduce_ns, 0);
    // 1,000 + 2 x 100 + 2 x 10
    assert_eq!(t.overhead_ns, 1_220);
    assert_eq!(t.total_ns, 552_192 + 4_096 + 2_560 + 1_220);
    assert_eq!(p.step_ns(&tiny_batch()), Ok(t.total_ns));
}

#[test]
fn step_terms_by_hand_tp2() {
    let p = Physics::new(TINY, SLOW, 2, HALF).unwrap();
    let t = p.step_terms(&tiny_batch()).unwrap();
    // the GEMMs and the weight stream split over 2 GPUs: 1,327.104 -> 1,327 and 256 ns; 276,096 ns
    assert_eq!((t.gemm_ns, t.weights_ns), (1_327 + 256, 276_096));
    // one KV head per GPU: 64 B per token and layer; prefill 18.432 FLOP-ns -> KV 1,024 B -> 2,048;
    // decode 640 B -> 1,280
    assert_eq!((t.prefill_attention_ns, t.decode_attention_ns), (2_048, 1_280));
    // ring all-reduce: 2 x (2 - 1) x 64 x 2 B = 256 B per token, 9 tokens = 2,304 B at
    // 2 x 1e9 x 0.5 = 2,304 ns; 2 per layer x 2 layers
    assert_eq!(t.allreduce_ns, 4 * 2_304);
    assert_eq!(t.total_ns, 276_096 + 2_048 + 1_280 + 9_216 + 1_220);
}

#[test]
fn the_kv_cache_has_its_own_memory_factor() {
    // HALF reads weights and KV at 50% of 5e8... B/s; kv_memory_ppm 250,000 reads the KV at 25%:
    // the KV bytes of step_terms_by_hand_tp1 take twice as long (prefill 2,048 B -> 8,192 ns,
    // decode 1,280 B -> 5,120 ns), the weights are unchanged (552,192 ns)
    let p = Physics::new(TINY, SLOW, 1, Calibration { kv_memory_ppm: 250_000, ..HALF }).unwrap();
    let t = p.step_terms(&tiny_batch()).unwrap();
    assert_eq!(t.weights_ns, 552_192);
    assert_eq!((t.prefill_attention_ns, t.decode_attention_ns), (8_192, 5_120));
    assert_eq!(t.total_ns, 552_192 + 8_192 + 5_120 + 1_220);
    // 0 is memory_ppm's value: the same step as step_terms_by_hand_tp1, bit for bit
    let same = Physics::new(TINY, SLOW, 1, Calibration { kv_memory_ppm: 0, ..HALF }).unwrap();
    let half = Physics::new(TINY, SLOW, 1, Calibration { kv_memory_ppm: 500_000, ..HALF }).unwrap();
    assert_eq!(same.step_terms(&tiny_batch()), half.step_terms(&tiny_batch()));
    assert_eq!(same.step_ns(&tiny_batch()), Ok(552_192 + 4_096 + 2_560 + 1_220));
    // past 100% is bad input naming the key
    let bad = Physics::new(TINY, SLOW, 1, Calibration { kv_memory_ppm: 1_000_001, ..HALF });
    assert!(matches!(bad, Err(Error::Invalid { field: CostField::KvMemoryPpm, .. })), "{bad:?}");
}

#[test]
fn shared_kv_reads_charge_a_fraction_of_the_extra_reads() {
    // three decodes with 32, 32 and 20 tokens cached, the two 32-token contexts one shared pair
    // of blocks (decode_shared 32: one extra holder of 32 tokens); TINY at tp 1 reads 128 B per
    // token and layer, 2 layers: (84 + 3) x 256 B = 22,272 B at 5e8 B/s = 44,544 ns (FLOPs:
    // 87 x 2 x 256 = 44,544 at 5e11 -> 89 ns, memory-bound)
    let mut s = BatchShape::new(0);
    for c in [32, 32, 20] {
        s.add_decode(c).unwrap();
    }
    s.decode_shared = 32;
    let at = |ppm: u32| {
        let p = Physics::new(TINY, SLOW, 1, Calibration { shared_kv_read_ppm: ppm, ..HALF }).unwrap();
        p.step_terms(&s).unwrap().decode_attention_ns
    };
    // off (1,000,000): every request reads its whole context, decode_shared ignored
    assert_eq!(at(1_000_000), 44_544);
    let plain = Physics::new(TINY, SLOW, 1, HALF).unwrap();
    assert_eq!(plain.step_terms(&BatchShape { decode_shared: 0, ..s }).unwrap().decode_attention_ns, 44_544);
    // f = 0.25: 32 x 2 x 128 x 0.75 = 6,144 B not read: 16,128 B -> 32,256 ns
    assert_eq!(at(250_000), 32_256);
    // f = 0: the 8,192 B of the extra reader not read: 14,080 B -> 28,160 ns
    assert_eq!(at(0), 28_160);
    // rounding: f = 0.333333: 8,192 x 0.666667 = 5,461.336 -> 5,461 B unread, 16,811 B ->
    // 33,622 ns
    assert_eq!(at(333_333), 33_622);
    // more shared than cached (not what the engine gives) is clamped to decode_cached (84)
    let mut all = s;
    all.decode_shared = 1_000;
    let p0 = Physics::new(TINY, SLOW, 1, Calibration { shared_kv_read_ppm: 0, ..HALF }).unwrap();
    // (87 - 84) x 256 = 768 B -> 1,536 ns; the FLOPs (89 ns) are below it
    assert_eq!(p0.step_terms(&all).unwrap().decode_attention_ns, 1_536);
    // the prefill's bytes and the rest of the step do not move
    let (a, b) = (plain.step_terms(&s).unwrap(), p0.step_terms(&s).unwrap());
    assert_eq!(
        (a.prefill_attention_ns, a.linear_ns, a.overhead_ns),
        (b.prefill_attention_ns, b.linear_ns, b.overhead_ns)
    );
    assert_eq!(a.total_ns - b.total_ns, 44_544 - 28_160);
    assert!(p0.shares_kv_reads() && !plain.shares_kv_reads());
    // past 100% is bad input naming the key
    let bad = Physics::new(TINY, SLOW, 1, Calibration { shared_kv_read_ppm: 1_000_001, ..HALF });
    assert!(matches!(bad, Err(Error::Invalid { field: CostField::SharedKvReadPpm, .. })), "{bad:?}");
}

#[test]
fn compute_bound_steps_take_the_compute_time() {
    // a fast memory: the linear phase is the GEMMs
    let hw = Hardware { hbm_bytes_per_s: 1_000_000_000_000_000, ..SLOW };
    let p = Physics::new(TINY, hw, 1, HALF).unwrap();
    let t = p.step_terms(&tiny_batch()).unwrap();
    assert_eq!(t.linear_ns, t.gemm_ns);
    assert_eq!(t.linear_ns, 3_166);
    // attention compute 36.864 -> 37 (prefill) and 5.12 -> 5 (decode); KV now ~0
    assert_eq!((t.prefill_attention_ns, t.decode_attention_ns), (37, 5));
}

#[test]
fn kv_capacity_by_hand() {
    let p = Physics::new(TINY, SLOW, 1, HALF).unwrap();
    // ceil(1e9 x 0.9) - 404,096 weights - 1,000,000 reserve = 898,595,904 B; / (16 x 128 B) =
    // 438,767; / 2 layers = 219,383 blocks
    assert_eq!(p.kv_capacity_blocks(), Ok(219_383));
    let none = p.with_calibration(Calibration { reserve_bytes: 899_595_904, ..HALF }).unwrap();
    assert_eq!(none.kv_capacity_blocks(), Err(Error::NoKvMemory { need_bytes: 900_000_000, have_bytes: 900_000_000 }));
}

#[test]
fn kv_capacity_of_llama_70b_on_4_h100_at_the_edge() {
    // ceil(85,018,877,624 x 0.9) = 76,516,989,862 B; weights 141,107,412,992 / 4 =
    // 35,276,853,248; 28,836 blocks x 16 x 1,024 B x 80 layers = 37,795,921,920; the largest
    // reserve leaving 28,836 blocks (461,376 tokens) is the difference, 3,444,214,694 B
    let cal = |r| Calibration { reserve_bytes: r, ..Calibration::PRIOR };
    let p = Physics::new(Model::Llama31_70b.desc(), Gpu::H100.hardware(), 4, cal(3_444_214_694)).unwrap();
    assert_eq!(p.kv_capacity_blocks(), Ok(28_836));
    assert_eq!(p.with_calibration(cal(3_444_214_695)).unwrap().kv_capacity_blocks(), Ok(28_835));
}

#[test]
fn kv_groups_of_hybrid_models_follow_vllm() {
    let p = PhysicsProfile::GptOss120bH100Tp1.physics().unwrap();
    // 18 full + 18 sliding layers: two groups of 18
    assert_eq!(p.kv_groups(), (18, 2));
    let s = |full: u32, sliding: u32| {
        let m = ModelDesc { layers: full + sliding, sliding: Some(Sliding { window: 4, layers: sliding }), ..TINY };
        Physics::new(m, SLOW, 1, HALF).unwrap().kv_groups()
    };
    // 5 : 1 (Gemma 3): groups of the smaller count
    assert_eq!(s(1, 5), (1, 6));
    // 13 full + 12 sliding: 13 < 1.25 x 12, groups of 13, sliding padded
    assert_eq!(s(13, 12), (13, 2));
    // 20 full + 30 sliding: 30 >= 25, groups of 20: 1 + 2
    assert_eq!(s(20, 30), (20, 3));
    assert_eq!(Physics::new(TINY, SLOW, 1, HALF).unwrap().kv_groups(), (2, 1));
}

#[test]
fn sliding_layers_cap_attention_and_kv() {
    // 2 layers, one with a window of 4 keys
    let m = ModelDesc { sliding: Some(Sliding { window: 4, layers: 1 }), ..TINY };
    let hw = Hardware { hbm_bytes_per_s: 1_000_000_000_000, ..SLOW };
    let p = Physics::new(m, hw, 1, HALF).unwrap();
    let mut s = p.shape();
    assert_eq!(s.window, 4);
    s.add_decode(100).unwrap();
    let t = p.step_terms(&s).unwrap();
    // full layer 101 keys + window layer 4 keys = 105 pairs x 256 FLOP = 26,880 at 5e11 -> 53.76;
    // KV: (100 + 1) + (4 + 1) tokens x 128 B = 13,568 B at 5e11 B/s -> 27.136 ns
    assert_eq!(t.decode_attention_ns, 54);
}

#[test]
fn moe_reads_the_experts_tokens_route_to() {
    let p = PhysicsProfile::GptOss120bH100Tp1.physics().unwrap();
    let weights = |decodes: u64| {
        let mut s = p.shape();
        for _ in 0..decodes {
            s.add_decode(0).unwrap();
        }
        p.step_terms(&s).unwrap().weights_ns
    };
    // 1 token: 4 experts per layer; 32 tokens or more: all 128
    let (one, all) = (weights(1), weights(32));
    assert!(one < all);
    assert_eq!(all, weights(1000));
    let bytes = |experts: u128| {
        let m = Model::GptOss120b.desc();
        m.streamed_bytes_without_experts() + 36 * experts * m.expert_bytes()
    };
    let ns = |b: u128| at_rate_ns(b, 3_350_000_000_000, Calibration::PUBLISHED.memory_ppm).unwrap() as u64;
    assert_eq!((one, all), (ns(bytes(4)), ns(bytes(128))));
}

#[test]
fn rounding_is_half_up_per_term() {
    assert_eq!(at_rate_ns(1, 1_000_000_000, 1_000_000), Ok(1));
    // 1.5 ns -> 2; 1.499... -> 1
    assert_eq!(at_rate_ns(3, 2_000_000_000, 1_000_000), Ok(2));
    assert_eq!(at_rate_ns(2_999, 2_000_000_000_000, 1_000_000), Ok(1));
    assert_eq!(at_rate_ns(0, 1, 1), Ok(0));
    assert_eq!(at_rate_ns(u128::MAX, 1, 1), Err(Error::Overflow { what: CostQuantity::StepTime }));
}

#[test]
fn every_builtin_validates_and_bad_descriptions_name_their_field() {
    for &m in Model::ALL {
        m.desc().validate().unwrap_or_else(|e| panic!("{m}: {e}"));
    }
    for &g in Gpu::ALL {
        g.hardware().validate().unwrap_or_else(|e| panic!("{g}: {e}"));
    }
    Calibration::PRIOR.validate().unwrap();
    Calibration::PUBLISHED.validate().unwrap();
    for &p in PhysicsProfile::ALL {
        let ph = p.physics().unwrap_or_else(|e| panic!("{p}: {e}"));
        ph.kv_capacity_blocks().unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(PhysicsProfile::parse(p.name()), Some(p));
    }
    let field = |r: Result<Physics, Error>| match r {
        Err(Error::Invalid { field, .. }) => field,
        other => panic!("{other:?}"),
    };
    let new = |m: ModelDesc, tp: u32| Physics::new(m, SLOW, tp, HALF);
    assert_eq!(field(new(ModelDesc { layers: 0, ..TINY }, 1)), CostField::Layers);
    assert_eq!(field(new(ModelDesc { kv_heads: 3, ..TINY }, 1)), CostField::KvHeads);
    assert_eq!(field(new(ModelDesc { kv_heads: 8, ..TINY }, 1)), CostField::KvHeads);
    assert_eq!(field(new(ModelDesc { kv_dtype: Dtype::Mxfp4, ..TINY }, 1)), CostField::KvDtype);
    assert_eq!(field(new(TINY, 3)), CostField::Tp);
    assert_eq!(field(new(TINY, 0)), CostField::Tp);
    assert_eq!(field(new(ModelDesc { vocab: u32::MAX, ..TINY }, 1)), CostField::Vocab);
    let huge = ModelDesc { layers: 1024, hidden: 1 << 20, intermediate: 1 << 20, ..TINY };
    assert_eq!(field(new(huge, 1)), CostField::Params);
    let moe = Moe {
        experts: 4,
        active: 5,
        expert_intermediate: 8,
        shared: 0,
        dense_layers: 0,
        router_bias: false,
        expert_bias: false,
        expert_dtype: Dtype::Bf16,
    };
    assert_eq!(field(new(ModelDesc { moe: Some(moe), ..TINY }, 1)), CostField::ActiveExperts);
    let bad_cal = Physics::new(TINY, SLOW, 1, Calibration { compute_ppm: 1_000_001, ..HALF });
    assert_eq!(field(bad_cal), CostField::ComputePpm);
    let no_step = Physics::new(TINY, SLOW, 1, Calibration { step_ns: 0, ..HALF });
    assert_eq!(field(no_step), CostField::StepNs);
    let bad_hw = Physics::new(TINY, Hardware { hbm_bytes_per_s: 0, ..SLOW }, 1, HALF);
    assert_eq!(field(bad_hw), CostField::HbmBytesPerS);
}

#[test]
fn absurd_batches_overflow_instead_of_wrapping() {
    let p = PhysicsProfile::DeepseekV3H200Tp8.physics().unwrap();
    let mut s = p.shape();
    s.prefill_tokens = u64::MAX;
    s.prefill_pairs = u64::MAX;
    assert_eq!(p.step_ns(&s), Err(Error::Overflow { what: CostQuantity::StepTime }));
}
