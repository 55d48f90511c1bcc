package felix

import (
	"fmt"
	"strings"

	log "github.com/sirupsen/logrus"
)

// ownLogger is a logger writing where base writes, in the same format and
// through the same hooks, with a level of its own. Each entry is one Write
// to the shared output, as with base itself.
func ownLogger(base *log.Logger) *log.Logger {
	return &log.Logger{
		Out: base.Out, Formatter: base.Formatter, Hooks: base.Hooks, ReportCaller: base.ReportCaller,
		ExitFunc: base.ExitFunc, Level: base.GetLevel(),
	}
}

// screenLevel maps Calico's severities (Debug, Info, Warning, Error,
// Fatal; any case) to logrus levels.
func screenLevel(severity string) (log.Level, error) {
	switch strings.ToLower(severity) {
	case "debug":
		return log.DebugLevel, nil
	case "info":
		return log.InfoLevel, nil
	case "warning":
		return log.WarnLevel, nil
	case "error":
		return log.ErrorLevel, nil
	case "fatal":
		return log.FatalLevel, nil
	}
	return 0, fmt.Errorf("unknown log severity %q (want Debug, Info, Warning, Error or Fatal)", severity)
}
