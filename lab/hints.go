package lab

import (
	"fmt"
	"io"
	"os"
	"os/exec"
)

// Hint is a command the lab suggests running next, and what it shows.
type Hint struct {
	Command string
	What    string
}

// Hints are the commands to look around the running lab with, as `lab
// up` and a kept demo print them, ending with the one that removes it.
// labCmd is how the user runs the lab CLI. Each runs as printed: with
// "sudo " only when this process was started through sudo.
func (l *Lab) Hints(labCmd string) []Hint {
	pre := sudoPrefix() + labCmd
	if root := l.st.Options.StateRoot; root != stateRoot("") {
		pre += " --state-dir " + root
	}
	name := " --name " + l.Name()
	first := l.Nodes()[0].Name
	hs := []Hint{
		{pre + " status" + name, "each node's calicoctl node status and routes"},
		{pre + " exec" + name + " " + first + " -- calicoctl get nodes -o wide", "calicoctl on a node (with the lab's join file)"},
		{pre + " exec" + name + " " + first + " -- ip route", "a node's routes"},
	}
	if pods := l.Pods(); len(pods) > 0 {
		hs = append(hs, Hint{pre + " exec" + name + " " + pods[0].Key() + " -- ip addr", "inside a pod"})
	}
	if l.st.Options.Kubernetes {
		hs = append(hs, Hint{pre + " kubectl" + name + " -- get networkpolicies,pods -A -o wide", "kubectl against the lab's API server"})
		if pods := l.Pods(); len(pods) > 1 {
			hs = append(hs, Hint{pre + " probe" + name + " " + pods[1].Key() + " " + pods[0].Key() + " --port 80", "a TCP probe between two pods (exit 0 when answered)"})
		}
	}
	if _, ok := l.Proc("bird/rr"); ok {
		hs = append(hs, Hint{pre + " exec" + name + " rr -- birdc show protocols", "the BIRD route reflector"})
	}
	last := l.Nodes()[len(l.Nodes())-1].Name
	hs = append(hs,
		Hint{pre + " pod add" + name + " " + last + " default/extra", "one more pod, through the calico CNI plugin"},
		Hint{pre + " down" + name, "remove it all"})
	return hs
}

// PrintHints writes Hints, saying that the lab's addresses exist only
// inside it.
func (l *Lab) PrintHints(w io.Writer, labCmd string) {
	hs := l.Hints(labCmd)
	width := 0
	for _, h := range hs {
		width = max(width, len(h.Command))
	}
	fmt.Fprintln(w, "Its addresses exist only inside the lab's namespaces: run everything through \"lab exec\".")
	for i, h := range hs {
		if i == len(hs)-1 {
			fmt.Fprintln(w, "Remove it:")
		}
		fmt.Fprintf(w, "  %-*s   %s\n", width, h.Command, h.What)
	}
}

// sudoPrefix is "sudo " when this process was started through sudo (so
// the user needs it again), else "": root without sudo, or a machine that
// has none, is told the bare command.
func sudoPrefix() string {
	if os.Getenv("SUDO_USER") == "" {
		return ""
	}
	if _, err := exec.LookPath("sudo"); err != nil {
		return ""
	}
	return "sudo "
}
