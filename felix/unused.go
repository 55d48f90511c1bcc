package felix

import (
	"strings"

	log "github.com/sirupsen/logrus"

	"github.com/palisade-net/palisade/felix/calc"
)

// unusedFields warns about the FelixConfiguration fields that are set but
// not acted on: once, and again when the list changes.
type unusedFields struct{ last string }

func (u *unusedFields) warn(cfg *calc.Config, logger *log.Entry) {
	fields := cfg.NotActedOn()
	list := strings.Join(fields, ", ")
	if list == u.last {
		return
	}
	u.last = list
	if list != "" {
		logger.WithField("fields", list).Warn("FelixConfiguration fields accepted but not acted on by Palisade's felix")
	}
}
