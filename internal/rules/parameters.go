package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dbkeeper/dbkeeper/internal/catalog"
)

// parameterKeyRE is the syntax of a key of spec.parameters: a setting name.
var parameterKeyRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_.-]*$`)

// ownedParameterHints tell, for the parameters dbkeeper owns (normalized),
// where to set them instead.
var ownedParameterHints = map[string]string{
	"port":                      "set spec.port instead",
	"synchronous_standby_names": "set spec.synchronous.standbys instead, which waits for that many of the other pods",
}

// normalizeParameter returns the setting a parameter key names
// (catalog.NormalizeParameter).
func normalizeParameter(key string) string { return catalog.NormalizeParameter(key) }

// validateParameters checks spec.parameters: bounded in number and size,
// keys that are setting names, values that fit on a command line, no two keys
// naming the same setting, and none of the settings dbkeeper owns.
func validateParameters(engine *catalog.EngineInfo, parameters map[string]string, errs *field.ErrorList) {
	if len(parameters) == 0 {
		return
	}
	if len(parameters) > MaxParameters {
		*errs = append(*errs, field.TooMany(parametersPath, len(parameters), MaxParameters))
	}
	keys := make([]string, 0, len(parameters))
	for k := range parameters {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	seen := make(map[string]string, len(keys))
	for _, key := range keys {
		path := parametersPath.Key(key)
		switch {
		case len(key) > MaxParameterKeyLength:
			err := field.TooLong(path, key, MaxParameterKeyLength)
			err.Detail = "key " + err.Detail
			*errs = append(*errs, err)
		case !parameterKeyRE.MatchString(key):
			*errs = append(*errs, field.Invalid(path, key,
				"key must start with a letter or '_' and contain only letters, digits, '_', '.' and '-'"))
		default:
			setting := normalizeParameter(key)
			if i := ownedParameter(engine, setting); i >= 0 {
				reason, ok := engine.OwnedParameterReasons[engine.OwnedParameters[i]]
				if !ok {
					reason = "set by dbkeeper"
				}
				detail := fmt.Sprintf("%s is %s", key, reason)
				if hint, ok := ownedParameterHints[setting]; ok {
					detail += "; " + hint
				}
				*errs = append(*errs, field.Forbidden(path, detail))
			} else if first, ok := seen[setting]; ok {
				err := field.Duplicate(path, key)
				err.Detail = fmt.Sprintf("names the same setting as %q", first)
				*errs = append(*errs, err)
			} else {
				seen[setting] = key
			}
		}
		value := parameters[key]
		switch {
		case len(value) > MaxParameterValueLength:
			err := field.TooLong(path, value, MaxParameterValueLength)
			err.Detail = "value " + err.Detail
			*errs = append(*errs, err)
		case strings.ContainsAny(value, "\n\r\x00"):
			*errs = append(*errs, field.Invalid(path, value, "value must not contain line breaks or NUL characters"))
		}
	}
}

// ownedParameter returns the index in engine.OwnedParameters of the
// (normalized) setting, -1 when dbkeeper does not own it or the engine is
// unknown.
func ownedParameter(engine *catalog.EngineInfo, setting string) int {
	if engine == nil {
		return -1
	}
	return slices.IndexFunc(engine.OwnedParameters, func(p string) bool { return normalizeParameter(p) == setting })
}
