//! Built-in physics profiles: a built-in model on `tp` built-in GPUs with the published
//! calibration ([`Calibration::PUBLISHED`]). Names are `model-gpu-tpN`.

use super::{Calibration, Error, Gpu, Model, Physics, cost_enum};

cost_enum! {
    /// Built-in physics profiles (the batched engine's `--profile` names with the physics step cost).
    pub enum PhysicsProfile {
        /// Qwen3-32B on 2 x H100 (llm-d's reference deployment).
        Qwen3_32bH100Tp2 => "qwen3-32b-h100-tp2",
        /// Qwen3-32B on 2 x H200.
        Qwen3_32bH200Tp2 => "qwen3-32b-h200-tp2",
        /// Qwen3-8B on one H100.
        Qwen3_8bH100Tp1 => "qwen3-8b-h100-tp1",
        /// Llama-3.1-8B on one H100.
        Llama31_8bH100Tp1 => "llama-3.1-8b-h100-tp1",
        /// Llama-3.1-8B on one A100 80 GB.
        Llama31_8bA100Tp1 => "llama-3.1-8b-a100-tp1",
        /// Llama-3.1-8B on one L40S.
        Llama31_8bL40sTp1 => "llama-3.1-8b-l40s-tp1",
        /// Llama-3.1-70B on 4 x H100 (llm-d's 37-capacity benchmark).
        Llama31_70bH100Tp4 => "llama-3.1-70b-h100-tp4",
        /// Llama-3.1-70B on 2 x B200.
        Llama31_70bB200Tp2 => "llama-3.1-70b-b200-tp2",
        /// gpt-oss-120b on one H100.
        GptOss120bH100Tp1 => "gpt-oss-120b-h100-tp1",
        /// DeepSeek-V3 on 8 x H200, tensor parallel (no expert parallelism: see docs/MODEL.md).
        DeepseekV3H200Tp8 => "deepseek-v3-h200-tp8",
    }
}

impl PhysicsProfile {
    /// Model, GPU and TP size.
    pub const fn parts(self) -> (Model, Gpu, u32) {
        use PhysicsProfile as P;
        match self {
            P::Qwen3_32bH100Tp2 => (Model::Qwen3_32b, Gpu::H100, 2),
            P::Qwen3_32bH200Tp2 => (Model::Qwen3_32b, Gpu::H200, 2),
            P::Qwen3_8bH100Tp1 => (Model::Qwen3_8b, Gpu::H100, 1),
            P::Llama31_8bH100Tp1 => (Model::Llama31_8b, Gpu::H100, 1),
            P::Llama31_8bA100Tp1 => (Model::Llama31_8b, Gpu::A100, 1),
            P::Llama31_8bL40sTp1 => (Model::Llama31_8b, Gpu::L40s, 1),
            P::Llama31_70bH100Tp4 => (Model::Llama31_70b, Gpu::H100, 4),
            P::Llama31_70bB200Tp2 => (Model::Llama31_70b, Gpu::B200, 2),
            P::GptOss120bH100Tp1 => (Model::GptOss120b, Gpu::H100, 1),
            P::DeepseekV3H200Tp8 => (Model::DeepseekV3, Gpu::H200, 8),
        }
    }

    /// The profile with the published calibration.
    pub fn physics(self) -> Result<Physics, Error> {
        let (m, g, tp) = self.parts();
        Physics::new(m.desc(), g.hardware(), tp, Calibration::PUBLISHED)
    }
}
