# Sourced by the GPU scripts (gpu_serve_bench.sh, gpu_eval.sh): sets MODEL to the GGUF they run.
# MODEL= as given wins; the default is Qwen2.5-Coder-1.5B (Q4_K_M, 1.1 GB) in the model cache
# ($SIEVE_HOME/models, else ~/.cache/sieve/models), the GPU benchmarks' model. A GPU machine
# has no network, so the file travels there in parts (`split -b 60M F F.part-`): when MODEL
# is missing but MODEL.part-* are beside it, they are joined into MODEL first.
# shellcheck shell=bash
gpu_model_resolve() {
  local dir=${SIEVE_HOME:-$HOME/.cache/sieve}/models
  MODEL=${MODEL:-$dir/qwen2.5-coder-1.5b.gguf}
  if [ ! -f "$MODEL" ] && compgen -G "$MODEL.part-*" >/dev/null; then
    local parts=("$MODEL".part-*)  # glob order: split's suffixes aa, ab, ...
    echo "joining ${#parts[@]} parts into $MODEL" >&2
    cat "${parts[@]}" > "$MODEL.tmp" && mv "$MODEL.tmp" "$MODEL" || return 1
  fi
  if [ ! -f "$MODEL" ]; then
    echo "MODEL=$MODEL is not a file: sieve pull qwen2.5-coder-1.5b (or set MODEL=...gguf; parts" \
      "MODEL.part-* beside it are joined)" >&2
    return 1
  fi
}
