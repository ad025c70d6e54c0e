# members.sh: the honest zoo's members, one kda conform target (-b / -p SPEC) a line, for
# zoo_check.sh and zoo_fpr.sh (sourced; ZOO is the folder holding the zoo's plugins).
# SPDX-License-Identifier: MIT
zoo_orders="spec crexp textbook numpy fold split f64acc rev pairwise block8 scaleout chunk16 chunk64 chunk64d perm"
zoo_members() {
  for o in $zoo_orders; do
    s=""; [ "$o" = perm ] && s=",seed=1"
    echo "-p $ZOO/kda_plugin_zoo.so:order=$o$s"
  done
  if grep -qw fma /proc/cpuinfo 2>/dev/null; then
    for o in $zoo_orders; do
      s=""; [ "$o" = perm ] && s=",seed=2"
      echo "-p $ZOO/kda_plugin_zoo_fma.so:order=$o$s"
    done
  fi
  echo "-b simd:isa=scalar"
  grep -qw avx2 /proc/cpuinfo 2>/dev/null && echo "-b simd:isa=avx2"
  grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo "-b simd:isa=avx512"
  echo "-b ref-f32"
}
# The bf16 zoo: bfloat16 inputs given exactly, float32 state and arithmetic, class bf16.
zoo_bf16_members() {
  for o in spec fold chunk64 perm; do
    s=""; [ "$o" = perm ] && s=",seed=3"
    echo "-p $ZOO/kda_plugin_zoo.so:input=bf16,order=$o$s"
  done
}
