// Package logging builds the one logger every Magos binary uses: zap behind logr, JSON in
// production, human-readable in development.
package logging

import (
	"fmt"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// Options configures New.
type Options struct {
	// Development selects readable console output and debug level; production is JSON.
	Development bool
	// Level is debug, info, warn or error; empty means info (debug in development).
	Level string
}

// New builds a logger from opts.
func New(opts Options) (logr.Logger, error) {
	zopts := []ctrlzap.Opts{ctrlzap.UseDevMode(opts.Development)}
	if opts.Level != "" {
		var lvl zapcore.Level
		if err := lvl.UnmarshalText([]byte(opts.Level)); err != nil {
			return logr.Discard(), fmt.Errorf("log level %q: want debug, info, warn or error", opts.Level)
		}
		zopts = append(zopts, ctrlzap.Level(lvl))
	}
	return ctrlzap.New(zopts...), nil
}
