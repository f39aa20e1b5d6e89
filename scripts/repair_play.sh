# The repair stage's play settings, sourced by scripts/train_bundled.sh (on any machine)
# and scripts/gpu_bundled.sh (on the GPU machine), so the two cannot drift apart: the
# stage-one model plays these train problems with two turns, and its failed episodes
# become repair rows (configs/bundled/data-repair.toml reads them from this state dir).
REPAIR_STATE=data/bundled/repair-state
REPAIR_RUN=(--turns 2 --seed 7 --json)
REPAIR_SUITE=(--suite bench --split train --level 1 --limit 24 --samples 2)
REPAIR_SYNTH=(--suite data/bundled/synth --split train --limit 30)

# The second round (docs/bundled-model.md, "A second round of repair rows"): the adapter
# trained on round one's rows plays the suite's other 57 level-1 train problems (the first
# 24 are mostly activations it already writes), 2 samples, into a store of its own.
REPAIR2_STATE=data/bundled/repair2-state
REPAIR2_SUITE=(--suite bench --split train --level 1 --samples 2
  --problem cumsum_rows --problem cumprod_rows --problem reverse_cumsum_rows
  --problem layer_norm --problem batch_norm2d --problem group_norm
  --problem l2_normalize --problem l1_normalize --problem frobenius_normalize
  --problem mse_loss --problem huber_loss --problem hinge_loss
  --problem cross_entropy_loss --problem cosine_similarity_loss
  --problem triplet_margin_loss --problem matmul_rectangular --problem batched_matmul
  --problem matrix_vector --problem tensor3d_matmul --problem matmul_transposed_b
  --problem matmul_transposed_both --problem lower_triangular_matmul
  --problem matmul_small_k --problem diag_matmul --problem max_pool1d
  --problem avg_pool1d --problem max_pool2d --problem max_pool3d --problem avg_pool3d
  --problem scaled_dot_product_attention --problem conv2d --problem conv2d_strided
  --problem conv2d_depthwise --problem conv2d_grouped --problem conv1d
  --problem conv_transpose2d --problem var_rows --problem logsumexp_rows
  --problem vector_norm_rows --problem sum_middle_dim --problem mean_first_dim
  --problem add_row_broadcast --problem mul_elementwise --problem where_select
  --problem clamp_scale --problem softmax_temperature --problem softmax_dim1_3d
  --problem smooth_l1_loss --problem bce_with_logits_loss
  --problem exclusive_cumsum_rows --problem matmul_fp16 --problem batch_norm1d
  --problem upper_triangular_matmul --problem amin_middle_dim --problem scalar_multiply
  --problem layer_norm_sample --problem conv3d)
