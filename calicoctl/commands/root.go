// Package commands builds the calicoctl command tree (cobra) and runs it.
// Each command lives in its own file; the logic they share (loading
// resources from files, connecting, printing, reporting) lives beside them.
package commands

import (
	"io"
	"os"

	log "github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
)

// Env is what a calicoctl run reads from and writes to: the standard
// streams and the environment. Tests fill it in to run commands in-process.
type Env struct {
	In     io.Reader
	Out    io.Writer
	ErrOut io.Writer
	// Getenv reads an environment variable.
	Getenv func(string) string
}

// app holds the global flags of one run and the Env it works in.
type app struct {
	env        Env
	configPath string
	logLevel   string
	// allowVersionMismatch is accepted as Calico's calicoctl accepts it;
	// Palisade's calicoctl does not compare its version with the cluster's.
	allowVersionMismatch bool
}

// NewRoot returns the calicoctl root command writing to out and errOut,
// reading stdin and the process environment.
func NewRoot(out, errOut io.Writer) *cobra.Command {
	return NewRootEnv(Env{In: os.Stdin, Out: out, ErrOut: errOut, Getenv: os.Getenv})
}

// NewRootEnv returns the calicoctl root command running in env.
func NewRootEnv(env Env) *cobra.Command {
	a := &app{env: env}
	root := &cobra.Command{
		Use:   "calicoctl",
		Short: "Manage Palisade (Calico-compatible) resources, IPAM and nodes",
		Long: "calicoctl manages the projectcalico.org/v3 resources of a Palisade cluster.\n" +
			"It speaks the same verbs, kinds and output formats as Calico's calicoctl.",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return a.setLogLevel()
		},
	}
	root.SetIn(env.In)
	root.SetOut(env.Out)
	root.SetErr(env.ErrOut)
	root.PersistentFlags().StringVarP(&a.configPath, "config", "c", DefaultConfigPath,
		"Path to the file containing connection configuration in YAML or JSON format.")
	root.PersistentFlags().StringVarP(&a.logLevel, "log-level", "l", "panic",
		"Log level: panic, fatal, error, warning, info or debug.")
	root.PersistentFlags().BoolVar(&a.allowVersionMismatch, "allow-version-mismatch", false,
		"Allow client and cluster versions mismatch (accepted for Calico compatibility; Palisade does not check versions).")
	root.AddCommand(
		newVersionCommand(a),
		newCreateCommand(a),
		newApplyCommand(a),
		newReplaceCommand(a),
		newDeleteCommand(a),
		newGetCommand(a),
		newPatchCommand(a),
		newLabelCommand(a),
		newCompletionCommand(a),
		newNodeCommand(a),
		newIPAMCommand(a),
		newPolicyCommand(a),
	)
	return root
}

// setLogLevel applies --log-level to logrus (to stderr).
func (a *app) setLogLevel() error {
	lvl, err := log.ParseLevel(a.logLevel)
	if err != nil {
		return err
	}
	log.SetOutput(a.env.ErrOut)
	log.SetLevel(lvl)
	return nil
}
