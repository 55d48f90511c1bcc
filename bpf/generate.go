package bpf

// The objects are committed: a build needs no clang. Regenerating needs
// clang-14 and libbpf-dev (hack/install-deps.sh --bpf). palisadeNoLoop is
// the same source without the policy engine (-DPAL_NO_LOOP: no bpf_loop
// call), for kernels before 5.17; Open loads it with Options.NoLoop.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -target bpfel -type state -type ep -type src_key -type set_key -type set_name -type port_key -type failsafe_key -type ct_key -type ct_value -type frag_key -type counter_key -type counter_value -type svc_key -type svc_value -type be_key -type be_value -type be_live_key -type nat_key -type nat_value -type aff_key -type aff_value -type maglev_key -type nat_cfg -type dsr_key -type nat_addr -type fip_value -type nodeports -type id6_key palisade c/palisade.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -target bpfel palisadeNoLoop c/palisade.c -- -DPAL_NO_LOOP -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang-14 -target bpfel -type ctlb_key -type ctlb_value ctlb c/ctlb.c -- -O2 -g -Wall -Werror -I/usr/include/x86_64-linux-gnu
