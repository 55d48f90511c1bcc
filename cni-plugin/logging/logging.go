// Package logging points the CNI plugins' logrus output at stderr or at
// log_file_path, never at stdout, which belongs to the CNI result.
package logging

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	log "github.com/sirupsen/logrus"
)

// Setup configures a logger at level (Calico's log_level: "debug", "info",
// "warning", "error"; "info" when empty) writing to path, or to stderr when
// path is empty. The returned closer flushes the file.
func Setup(level, path string) (*log.Logger, io.Closer, error) {
	logger := log.New()
	logger.SetOutput(os.Stderr)
	logger.SetFormatter(&log.TextFormatter{DisableColors: true, FullTimestamp: true, TimestampFormat: "2006-01-02 15:04:05.000"})
	lvl := log.InfoLevel
	if level != "" {
		parsed, err := log.ParseLevel(level)
		if err != nil {
			return logger, io.NopCloser(nil), fmt.Errorf("log_level %q: %w", level, err)
		}
		lvl = parsed
	}
	logger.SetLevel(lvl)
	if path == "" {
		return logger, io.NopCloser(nil), nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return logger, io.NopCloser(nil), fmt.Errorf("log_file_path %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return logger, io.NopCloser(nil), fmt.Errorf("log_file_path %s: %w", path, err)
	}
	logger.SetOutput(f)
	return logger, f, nil
}
