//! Sample messages for tests: one of every message type, with every optional field both
//! set and unset somewhere. The mirror test sends them through Python.
//!
//! Compiled only for this crate's tests and under the `fixtures` feature (which the
//! crate's own integration tests enable through a dev-dependency), so they stay out of
//! the release binary.

use std::collections::BTreeMap;

use crate::*;

/// One example of every message type, with every optional field both set and unset
/// somewhere.
pub fn sample_messages() -> Vec<Message> {
    let env = EnvInfo {
        python: "3.11.7".into(),
        platform: "Linux-x86_64".into(),
        torch: "2.11.0".into(),
        triton: "3.6.0".into(),
        numpy: "2.4.6".into(),
        device: DeviceKind::Cuda,
        interpret: false,
        cuda: Some("13.0".into()),
        driver: None,
        gpus: vec![GpuInfo {
            index: 0,
            name: "NVIDIA H100".into(),
            memory_bytes: 80 << 30,
            capability: "9.0".into(),
        }],
    };
    let job = EvalJob {
        problem: SourceFile {
            name: "relu.py".into(), source: "import torch\n# ünïcode\n".into()
        },
        candidate: SourceFile { name: "relu.py".into(), source: "class ModelNew: pass\n".into() },
        trials: 5,
        seed: 42,
        tolerance: Some(Tolerance { atol: 1e-4, rtol: 0.5 }),
        overrides: BTreeMap::from([
            ("N".to_string(), serde_json::json!(64)),
            ("EPS".to_string(), serde_json::json!(1e-5)),
        ]),
        device: DeviceRequest::Auto,
        timing: true,
        timing_budget_ms: 400,
        speedup_cap: 10.0,
        profile: true,
        compile_baseline: false,
        runtime: RuntimePolicy {
            allow_aten: vec!["empty_like".into(), "view".into()],
            allow_torch_compute: false,
            min_kernel_share: 0.1,
        },
        shape_check: Some(BTreeMap::from([("N".to_string(), serde_json::json!(37))])),
        gpu_memory_fraction: None,
    };
    let need = MemoryNeed {
        method: MemoryMethod::Allocator,
        params_bytes: 0,
        input_bytes: 6_442_450_944,
        output_bytes: 6_442_450_944,
        forward_bytes: 6_442_450_944,
        correctness_bytes: 32_212_254_720,
        timing_bytes: Some(33_000_000_000),
    };
    let cpu_need =
        MemoryNeed { method: MemoryMethod::TensorSizes, timing_bytes: None, ..need.clone() };
    let frame = Frame {
        file: "relu.py".into(),
        line: 12,
        function: "forward".into(),
        code: "y = x / 0".into(),
    };
    let verdict = Verdict {
        status: Status::Incorrect,
        stage: Stage::Correctness,
        message: "trial 1, output 0: mismatch".into(),
        error: Some(ErrorInfo {
            exc_type: "ValueError".into(),
            message: "boom".into(),
            frames: vec![frame],
            out_of_memory: false,
        }),
        mismatch: Some(Mismatch {
            trial: 1,
            output: 0,
            kind: MismatchKind::Value,
            expected: "1.0".into(),
            got: "2.5".into(),
            max_abs_err: Some(1.5),
            max_rel_err: None,
            worst_index: vec![3, 7],
            mismatched: 2,
            total: 1024,
        }),
        trials: vec![TrialStat {
            trial: 0,
            seed: 43,
            outputs: 1,
            max_abs_err: Some(0.0),
            max_rel_err: Some(0.0),
            passed: true,
        }],
        timing: Some(Timing {
            reference: TimingStats {
                median_ms: 1.25,
                iqr_ms: 0.01,
                samples: 100,
                host_median_ms: 1.3,
                mean_ms: Some(1.26),
                std_ms: Some(0.01),
                min_ms: Some(1.24),
                max_ms: Some(1.31),
            },
            candidate: TimingStats {
                median_ms: 0.5,
                iqr_ms: 0.02,
                samples: 100,
                host_median_ms: 0.55,
                mean_ms: Some(0.51),
                std_ms: Some(0.02),
                min_ms: Some(0.49),
                max_ms: Some(0.6),
            },
            speedup: 2.5,
            speedup_low: 2.4,
            speedup_high: 2.6,
            flags: vec![TimingFlag::ImplausibleSpeedup, TimingFlag::ClockDisagreement],
            checked_outputs: 3,
            harness_ms: 0.012,
            compiled: Some(TimingStats {
                median_ms: 0.9,
                iqr_ms: 0.01,
                samples: 100,
                host_median_ms: 0.95,
                mean_ms: None,
                std_ms: None,
                min_ms: None,
                max_ms: None,
            }),
            window: Some(WindowOpen {
                how: WindowHow::Cushion,
                gates_given_up: 0,
                spin_because: Some(SpinBecause::ProbeGaveUp),
            }),
        }),
        timing_note: None,
        tolerance: Some(Tolerance { atol: 1e-4, rtol: 1e-4 }),
        provenance: Some(Provenance {
            kernels: vec![KernelLaunches { name: "relu_kernel".into(), launches: 12 }],
            calls: 12,
            calls_without_launch: 0,
            gpu_share: Some(0.97),
            window_share: Some(0.9),
            model_share: Some(0.8),
        }),
        phases: Some(PhaseTimes {
            build_ms: 812.0,
            trials_ms: 40.5,
            shape_check_ms: 12.0,
            timing_ms: 300.25,
            timed_ms: 120.5,
            compile_ms: Some(650.0),
            shared_wait_ms: Some(80.5),
        }),
        needs_hardware_queues: true,
    };
    let preflight_job = job.clone();
    let preflight_verdict = verdict.clone();
    vec![
        Message::Hello {
            worker_version: "0.1.0".into(),
            pid: 1234,
            env: env.clone(),
            sandbox: Sandbox {
                landlock_abi: Some(7),
                filesystem: true,
                network: true,
                signals: true,
                gpu_memory_fraction: Some(0.2),
                notes: vec![],
            },
            startup: Some(StartupTimes {
                context_ms: 310.5,
                warm_up_ms: 1204.25,
                total_ms: 1650.0,
            }),
        },
        Message::Hello {
            worker_version: "0.1.0".into(),
            pid: 1,
            env: EnvInfo {
                device: DeviceKind::Cpu,
                interpret: true,
                cuda: None,
                gpus: vec![],
                ..env
            },
            sandbox: Sandbox {
                landlock_abi: None,
                filesystem: false,
                network: false,
                signals: false,
                gpu_memory_fraction: None,
                notes: vec!["landlock unavailable".into()],
            },
            startup: None,
        },
        Message::Evaluate { id: "job-1".into(), job: job.clone() },
        Message::Evaluate {
            id: "job-2".into(),
            job: EvalJob {
                tolerance: None,
                overrides: BTreeMap::new(),
                device: DeviceRequest::Cpu,
                timing: false,
                profile: false,
                runtime: RuntimePolicy {
                    allow_aten: vec![],
                    allow_torch_compute: true,
                    min_kernel_share: 0.0,
                },
                shape_check: None,
                gpu_memory_fraction: Some(0.9),
                ..job
            },
        },
        Message::Result {
            id: "job-1".into(),
            outcome: Outcome::Verdict(verdict.clone()),
            elapsed_ms: 12.5,
        },
        Message::Result {
            id: "job-2".into(),
            outcome: Outcome::Verdict(Verdict {
                status: Status::Correct,
                error: None,
                mismatch: None,
                timing: None,
                timing_note: Some("timing unavailable in CPU mode".into()),
                tolerance: None,
                provenance: None,
                ..verdict
            }),
            elapsed_ms: 3.0,
        },
        Message::Result {
            id: "job-3".into(),
            outcome: Outcome::ProblemError(ProblemError {
                message: "relu.py: problem file defines no `get_inputs`".into(),
                error: None,
            }),
            elapsed_ms: 1.0,
        },
        Message::Error { id: None, message: "not JSON".into() },
        Message::Error { id: Some("job-9".into()), message: "bad".into() },
        Message::Shutdown {},
        Message::CheckProblem {
            id: "check-1".into(),
            job: ProblemCheckJob {
                problem: SourceFile { name: "relu.py".into(), source: "N = 4\n".into() },
                overrides: BTreeMap::from([("N".to_string(), serde_json::json!(8))]),
                seed: 7,
                seeds: 3,
                tolerance: None,
                device: DeviceRequest::Cpu,
                gpu_memory_fraction: None,
            },
        },
        Message::CheckProblem {
            id: "check-2".into(),
            job: ProblemCheckJob {
                problem: SourceFile { name: "relu.py".into(), source: "N = 4\n".into() },
                overrides: BTreeMap::new(),
                seed: 7,
                seeds: 2,
                tolerance: Some(Tolerance { atol: 1e-2, rtol: 1e-2 }),
                device: DeviceRequest::Cuda,
                gpu_memory_fraction: Some(0.9),
            },
        },
        Message::ProblemReport {
            id: "check-1".into(),
            report: ProblemReport {
                findings: vec!["output 0 is constant".into()],
                error: None,
                outputs: vec![
                    OutputSummary {
                        shape: vec![4, 8],
                        dtype: "float32".into(),
                        std: Some(0.99),
                        tolerance_scale: Some(1.8e-4),
                    },
                    OutputSummary {
                        shape: vec![],
                        dtype: "int64".into(),
                        std: None,
                        tolerance_scale: None,
                    },
                ],
                max_forward_ms: 1.5,
                memory: Some(cpu_need),
            },
            elapsed_ms: 30.0,
        },
        Message::ProblemReport {
            id: "check-2".into(),
            report: ProblemReport {
                findings: vec![],
                error: Some(ErrorInfo {
                    exc_type: "OutOfMemoryError".into(),
                    message: "CUDA out of memory".into(),
                    frames: vec![],
                    out_of_memory: true,
                }),
                outputs: vec![],
                max_forward_ms: 0.0,
                memory: None,
            },
            elapsed_ms: 3.0,
        },
        Message::MeasureMemory {
            id: "measure-1".into(),
            job: MemoryJob {
                problem: SourceFile { name: "relu.py".into(), source: "N = 4\n".into() },
                overrides: BTreeMap::from([("N".to_string(), serde_json::json!(8))]),
                shape_check: Some(BTreeMap::from([("N".to_string(), serde_json::json!(9))])),
                seed: 42,
                device: DeviceRequest::Auto,
                gpu_memory_fraction: None,
            },
        },
        Message::MeasureMemory {
            id: "measure-2".into(),
            job: MemoryJob {
                problem: SourceFile { name: "relu.py".into(), source: "N = 4\n".into() },
                overrides: BTreeMap::new(),
                shape_check: None,
                seed: 0,
                device: DeviceRequest::Cpu,
                gpu_memory_fraction: Some(0.9),
            },
        },
        Message::MemoryReport {
            id: "measure-1".into(),
            report: MemoryReport { need: Some(need), error: None },
            elapsed_ms: 250.0,
        },
        Message::MemoryReport {
            id: "measure-2".into(),
            report: MemoryReport {
                need: None,
                error: Some(ErrorInfo {
                    exc_type: "OutOfMemoryError".into(),
                    message: "CUDA out of memory. Tried to allocate 6.00 GiB".into(),
                    frames: vec![],
                    out_of_memory: true,
                }),
            },
            elapsed_ms: 12.0,
        },
        Message::Preflight { id: "job-7".into(), job: preflight_job },
        Message::PreflightResult {
            id: "job-7".into(),
            outcome: PreflightOutcome::Passed {},
            elapsed_ms: 40.0,
        },
        Message::PreflightResult {
            id: "job-8".into(),
            outcome: PreflightOutcome::Failed {
                verdict: TaggedVerdict::Verdict(preflight_verdict),
            },
            elapsed_ms: 25.0,
        },
        Message::PreflightResult {
            id: "job-9".into(),
            outcome: PreflightOutcome::Inconclusive {
                reason: "the candidate's import touched the GPU".into(),
            },
            elapsed_ms: 900.0,
        },
        Message::LeaseRequest { id: "job-1".into(), kind: LeaseKind::Exclusive },
        Message::LeaseGrant { id: "job-1".into(), kind: LeaseKind::Shared },
        Message::LeaseRelease { id: "job-1".into() },
        Message::Generate {
            id: "gen-1".into(),
            job: GenerateJob {
                messages: vec![
                    ChatTurn { role: "system".into(), content: "You write Triton kernels.".into() },
                    ChatTurn { role: "user".into(), content: "relu, please".into() },
                ],
                temperature: 0.7,
                top_p: 0.95,
                max_tokens: 64,
                seed: Some(3),
                top_k: Some(50),
                stop_token_ids: Some(vec![2, 7]),
            },
        },
        Message::Generation {
            id: "gen-1".into(),
            result: Generated {
                text: "```python\n```".into(),
                prompt_ids: vec![1, 9690, 198],
                token_ids: vec![4236, 2],
                logprobs: vec![-0.25, -1.5],
                finish_reason: "stop".into(),
                sampling_logprobs: Some(vec![-0.125, -1.0]),
            },
            elapsed_ms: 812.5,
        },
        Message::TrainSetup {
            id: "train-1".into(),
            setup: TrainSetup {
                model: "configs/models/tiny-llama".into(),
                resume: None,
                lora: Some(LoraSetup {
                    rank: 16,
                    alpha: 32.0,
                    dropout: 0.05,
                    target_modules: vec!["q_proj".into(), "v_proj".into()],
                }),
                lr: 1e-5,
                min_lr: 1e-6,
                warmup_steps: 10,
                total_steps: 100,
                weight_decay: 0.0,
                grad_clip: 1.0,
                gradient_checkpointing: true,
                dtype: Precision::Auto,
                seed: 7,
                attention: Attention::Sdpa,
                compile: Compile::Off,
                one_per_row: false,
            },
        },
        Message::TrainSetup {
            id: "train-2".into(),
            setup: TrainSetup {
                model: "smollm2".into(),
                resume: Some("out/checkpoint-000020".into()),
                lora: None,
                lr: 2e-5,
                min_lr: 0.0,
                warmup_steps: 0,
                total_steps: 40,
                weight_decay: 0.1,
                grad_clip: 0.0,
                gradient_checkpointing: false,
                dtype: Precision::Fp32,
                seed: 0,
                attention: Attention::FlexAttention,
                compile: Compile::Auto,
                one_per_row: true,
            },
        },
        Message::TrainReady {
            id: "train-1".into(),
            info: TrainInfo {
                parameters: 134_515_008,
                trainable: 134_515_008,
                head_parameters: 28_311_552,
                vocab_size: 49152,
                layers: 30,
                attention_width: 576,
                dtype: WeightDtype::Bfloat16,
                device: "cuda".into(),
                world_size: 1,
                gpu_name: Some("NVIDIA H100 80GB HBM3".into()),
                step: 0,
                compiled: true,
                attention: "tritonforge_varlen, rows: cudnn".into(),
            },
        },
        Message::TrainStep {
            id: "step-1".into(),
            batch: TrainBatch {
                micro: vec![MicroBatch {
                    input_ids: vec![vec![1, 2, 3, 4]],
                    loss_mask: vec![vec![0, 0, 1, 1]],
                    position_ids: vec![vec![0, 1, 0, 1]],
                    lengths: vec![4],
                }],
            },
        },
        Message::EvalLoss { id: "eval-1".into(), batch: TrainBatch { micro: vec![] } },
        Message::StepDone {
            id: "step-1".into(),
            stats: StepStats {
                step: 1,
                loss: 2.5,
                loss_tokens: 2,
                tokens: 4,
                grad_norm: Some(0.75),
                lr: 1e-6,
                elapsed_ms: 12.5,
                memory_bytes: None,
            },
        },
        Message::StepDone {
            id: "eval-1".into(),
            stats: StepStats {
                step: 1,
                loss: 2.25,
                loss_tokens: 2,
                tokens: 4,
                grad_norm: None,
                lr: 1e-6,
                elapsed_ms: 3.0,
                memory_bytes: Some(1 << 30),
            },
        },
        Message::SaveCheckpoint {
            id: "save-1".into(),
            save: SaveJob {
                dir: "out/checkpoint-000001".into(),
                merge_lora: true,
                trainer_state: true,
            },
        },
        Message::Checkpointed { id: "save-1".into(), dir: "out/checkpoint-000001".into(), step: 1 },
        Message::Score {
            id: "score-1".into(),
            job: ScoreJob {
                batch: TrainBatch {
                    micro: vec![MicroBatch {
                        input_ids: vec![vec![1, 2, 3, 4]],
                        loss_mask: vec![vec![0, 0, 1, 1]],
                        position_ids: vec![vec![0, 1, 2, 3]],
                        lengths: vec![4],
                    }],
                },
                reference: true,
                temperature: 0.75,
            },
        },
        Message::Scored {
            id: "score-1".into(),
            scores: Scores { logprobs: vec![vec![vec![-0.5, -2.25]]], elapsed_ms: 4.5 },
        },
        Message::RlStep {
            id: "rl-1".into(),
            batch: RlBatch {
                micro: vec![
                    RlMicroBatch {
                        rows: MicroBatch {
                            input_ids: vec![vec![1, 2, 3, 4], vec![5, 6, 7, 0]],
                            loss_mask: vec![vec![0, 0, 1, 1], vec![0, 1, 1, 0]],
                            position_ids: vec![vec![0, 1, 2, 3], vec![0, 1, 2, 3]],
                            lengths: vec![4, 3],
                        },
                        advantages: vec![vec![0.5, 0.5], vec![-1.0, -1.0]],
                        behaviour: vec![vec![-0.25, -1.5], vec![-3.0, -0.125]],
                        proximal: Some(vec![vec![-0.5, -1.25], vec![-2.75, -0.25]]),
                        reference: None,
                    },
                    RlMicroBatch {
                        rows: MicroBatch {
                            input_ids: vec![vec![8, 9]],
                            loss_mask: vec![vec![0, 1]],
                            position_ids: vec![vec![0, 1]],
                            lengths: vec![2],
                        },
                        advantages: vec![vec![1.0]],
                        behaviour: vec![vec![-0.75]],
                        proximal: None,
                        reference: Some(vec![vec![-1.0]]),
                    },
                ],
                loss: RlLoss {
                    clip_low: 0.2,
                    clip_high: 0.28,
                    kl_coef: 0.01,
                    entropy_coef: 0.0,
                    tis_cap: 2.0,
                    loss_tokens: 5,
                    temperature: 1.0,
                },
            },
        },
        Message::RlDone {
            id: "rl-1".into(),
            stats: RlStats {
                step: 3,
                loss: 0.125,
                policy_loss: 0.25,
                kl: Some(0.0625),
                entropy: 3.5,
                clip_fraction: 0.2,
                ratio_mean: 1.0,
                ratio_max: 1.5,
                tis_capped: 0.0,
                grad_norm: 0.5,
                lr: 1e-6,
                loss_tokens: 5,
                tokens: 10,
                elapsed_ms: 20.0,
                memory_bytes: None,
                device: Some(DeviceUse {
                    wall_s: 12.5,
                    generate_s: 8.0,
                    train_s: 3.0,
                    refresh_s: 0.25,
                    gpu_busy_s: None,
                    gpu_sampled_s: None,
                    graphs_compiled: Some(3),
                    alloc_retries: Some(0),
                    engine: Some(EngineUse {
                        decode_steps: 40,
                        decode_rows: 90,
                        decode_width: 160,
                        prefill_tokens: 700,
                        reused_tokens: 300,
                        prefill_forwards: 6,
                        moved_rows: 12,
                        decode_ms: 61.5,
                        prefill_ms: 20.25,
                        prefill_padded: 768,
                        prefill_graphs: 2,
                    }),
                }),
            },
        },
    ]
}
