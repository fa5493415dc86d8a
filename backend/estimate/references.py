"""Published formulas we check ourselves against (tests/estimate/test_estimate_references.py).

* ZeRO paper (Rajbhandari et al., SC 2020, section 5.1 and Figure 1): model-state memory per
  device for Psi parameters, N_d data-parallel devices and K = 12 bytes of optimizer state
  per parameter (fp32 master + Adam m + v), with 2 + 2 bytes of fp16 parameters and gradients.
* DeepSpeed's estimators, transcribed from deepspeed/runtime/zero/stage_1_and_2.py
  (`estimate_zero2_model_states_mem_needs`) and deepspeed/runtime/zero/stage3.py
  (`estimate_zero3_model_states_mem_needs`). They return (cpu_bytes, gpu_bytes) per node /
  per GPU for parameters, gradients and optimizer states only (no activations, no logits).
"""

from __future__ import annotations


def zero_paper_model_states(psi: float, n_d: int, stage: int, k: int = 12) -> float:
    """Bytes per device: baseline (stage 0), P_os (1), P_os+g (2), P_os+g+p (3)."""
    if stage == 0:
        return (2 + 2 + k) * psi
    if stage == 1:
        return 2 * psi + 2 * psi + k * psi / n_d
    if stage == 2:
        return 2 * psi + (2 + k) * psi / n_d
    if stage == 3:
        return (2 + 2 + k) * psi / n_d
    raise ValueError(f"ZeRO stage must be 0-3, got {stage}")


def deepspeed_zero2_estimate(total_params: float, num_gpus_per_node: int = 1, num_nodes: int = 1,
                             cpu_offload: bool = True, additional_buffer_factor: float = 1.5) -> tuple[int, int]:
    """(cpu_mem, gpu_mem) as DeepSpeed's estimate_zero2_model_states_mem_needs returns them."""
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu_mem = 2 * total_params
        cpu_mem = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu_mem = 4 * total_params + int(16 * total_params / total_gpus)
        cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)


def deepspeed_zero3_estimate(total_params: float, largest_layer_params: float, num_gpus_per_node: int = 1,
                             num_nodes: int = 1, cpu_offload: bool = True, cpu_offload_params: bool = True,
                             zero_init: bool = True, additional_buffer_factor: float = 1.5) -> tuple[int, int]:
    """(cpu_mem, gpu_mem) as DeepSpeed's estimate_zero3_model_states_mem_needs returns them."""
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_memory = 4 * largest_layer_params
    if cpu_offload:
        if cpu_offload_params:
            gpu_mem = largest_layer_memory
            per_param = 18 * gpus_factor if zero_init else max(4 * num_gpus_per_node, 18 * gpus_factor)
        else:
            gpu_mem = largest_layer_memory + int(2 * total_params / total_gpus)
            per_param = 16 * gpus_factor if zero_init else max(4 * num_gpus_per_node, 16 * gpus_factor)
        cpu_mem = total_params * per_param * additional_buffer_factor
    else:
        gpu_mem = largest_layer_memory + int(18 * total_params / total_gpus)
        if zero_init:
            cpu_mem = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu_mem = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return int(cpu_mem), int(gpu_mem)
