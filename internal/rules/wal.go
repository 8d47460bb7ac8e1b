package rules

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// walKeepSetting is what spec.parameters says of the bound of a
// replication slot's WAL (catalog.EngineInfo.WALKeepParameter), and of
// the volume it must fit in.
type walKeepSetting struct {
	// key is the key of spec.parameters that sets it; "" when none does.
	key string
	// value is that key's value.
	value string
	// bytes is the value in bytes, meaningful when err is nil.
	bytes int64
	// err is why the value is not a size.
	err error
	// volume is spec.storage.size in bytes; 0 when unset or out of range.
	volume int64
	// defaultValue is what dbkeeper would set instead.
	defaultValue string
}

// walKeepOf reads the bound of a slot's WAL that spec sets for engine;
// key is "" when spec.parameters does not set it.
func walKeepOf(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec) walKeepSetting {
	var w walKeepSetting
	if engine == nil {
		return w
	}
	w.value, w.key = engine.WALKeep(spec.Parameters, spec.Storage.Size)
	if size := spec.Storage.Size; size != nil && quantityInRange(*size) && size.Sign() > 0 {
		w.volume = size.Value()
		w.defaultValue = catalog.DefaultWALKeep(*size)
	}
	if w.key != "" {
		w.bytes, w.err = catalog.ParsePostgresSize(w.value, catalog.WALKeepUnit)
	}
	return w
}

// validateWALKeep checks the bound of a replication slot's WAL that
// spec.parameters sets: a PostgreSQL size, not -1 (unlimited) nor
// negative, and no larger than spec.storage.size, since past the volume a
// standby that stops streaming fills the primary's disk before its slot
// is invalidated.
func validateWALKeep(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec, errs *field.ErrorList) {
	w := walKeepOf(engine, spec)
	if w.key == "" || len(w.key) > MaxParameterKeyLength || len(w.value) > MaxParameterValueLength {
		return
	}
	path := parametersPath.Key(w.key)
	fix := "remove the key for dbkeeper's default, a quarter of spec.storage.size"
	if w.defaultValue != "" {
		fix += " (" + w.defaultValue + ")"
	}
	switch {
	case w.err != nil:
		*errs = append(*errs, field.Invalid(path, w.value, fmt.Sprintf(
			"must be a PostgreSQL size: a whole number of megabytes, or a number with the unit B, kB, MB, GB or TB, e.g. 2GB (%v); or %s",
			strings.TrimPrefix(w.err.Error(), catalog.ErrNotASize.Error()+": "), fix)))
	case w.bytes < 0:
		*errs = append(*errs, field.Invalid(path, w.value, fmt.Sprintf(
			"may not be negative: -1 (unlimited) lets the replication slot of a standby that stops streaming fill the primary's volume, which stops the primary; set a size up to spec.storage.size, or %s", fix)))
	case w.volume > 0 && w.bytes > w.volume:
		*errs = append(*errs, field.Invalid(path, w.value, fmt.Sprintf(
			"exceeds spec.storage.size (%s): a standby that stops streaming would fill the primary's volume before its slot is invalidated; set at most %dMB, or %s",
			quantityString(*spec.Storage.Size), w.volume>>20, fix)))
	}
}

// walKeepWarning warns of a legal but risky bound of a slot's WAL: 0,
// which invalidates the slot of any standby that falls behind at all, or
// more than half of the volume, which leaves the data and the server's
// own WAL less than half. It returns "" otherwise.
func walKeepWarning(engine *catalog.EngineInfo, spec *dbv1.DatabaseSpec) string {
	w := walKeepOf(engine, spec)
	if w.key == "" || w.err != nil || w.bytes < 0 || w.volume > 0 && w.bytes > w.volume {
		return ""
	}
	path := parametersPath.Key(w.key).String()
	switch {
	case w.bytes == 0:
		return path + " is 0: the replication slot of a standby that falls behind at all, even while it restarts, is invalidated, and the standby must be cloned again"
	case w.volume > 0 && w.bytes > w.volume/2:
		return fmt.Sprintf("%s is %s, more than half of spec.storage.size (%s): a standby that stops streaming may leave the primary's data and its own WAL less than half the volume",
			path, w.value, quantityString(*spec.Storage.Size))
	}
	return ""
}
