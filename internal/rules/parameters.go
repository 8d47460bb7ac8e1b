package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
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
// naming the same setting, none of the settings dbkeeper owns or refuses
// (refusedParameter), and the values of the settings allowed within rules
// (parameterValueRules).
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
		refused := false
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
			if reason, ok := refusedParameter(engine, setting); ok {
				refused = true
				*errs = append(*errs, field.Forbidden(path, key+" is "+reason))
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
		case !refused && engine != nil:
			if check, ok := parameterValueRules[engine.Name][normalizeParameter(key)]; ok {
				if detail := check(value); detail != "" {
					*errs = append(*errs, field.Invalid(path, value, detail))
				}
			}
		}
	}
}

// refusedParameter returns why a user may not set the (normalized)
// setting, and false when it may be set: the settings dbkeeper owns
// (catalog.EngineInfo.OwnedParameters), those it refuses
// (RefusedParameters), and those named like them (NamePatterns), under
// their own name and under the prefixes the server strips
// (OptionPrefixes: mysql's loose-init-file is init-file).
func refusedParameter(engine *catalog.EngineInfo, setting string) (string, bool) {
	if engine == nil {
		return "", false
	}
	names := []string{setting}
	for name := setting; ; {
		i := slices.IndexFunc(engine.OptionPrefixes, func(p string) bool { return strings.HasPrefix(name, p) && len(name) > len(p) })
		if i < 0 {
			break
		}
		name = strings.TrimPrefix(name, engine.OptionPrefixes[i])
		names = append(names, name)
	}
	// The lists first: their reasons say more than a pattern's.
	for _, name := range names {
		if i := ownedParameter(engine, name); i >= 0 {
			reason, ok := engine.OwnedParameterReasons[engine.OwnedParameters[i]]
			if !ok {
				reason = "set by dbkeeper"
			}
			if hint, ok := ownedParameterHints[name]; ok {
				reason += "; " + hint
			}
			return reason, true
		}
		if reason, ok := engine.RefusedParameters[name]; ok {
			return reason, true
		}
	}
	for _, name := range names {
		if slices.Contains(engine.NamePatternExceptions, name) {
			continue
		}
		for _, p := range engine.NamePatterns {
			if p.Pattern.MatchString(name) {
				return p.Reason, true
			}
		}
	}
	return "", false
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

// parameterValueRules check, per engine and (normalized) setting, the
// value of a setting users may set only within limits; each returns what
// is wrong with the value, "" when nothing is.
var parameterValueRules = map[dbv1.Engine]map[string]func(string) string{
	dbv1.EnginePostgres: {
		"ssl_min_protocol_version":  minTLSVersion,
		"ssl_max_protocol_version":  maxTLSVersion,
		"password_encryption":       scramOnly,
		"ssl_ciphers":               strongCiphers,
		"shared_preload_libraries":  libraryList,
		"local_preload_libraries":   libraryList,
		"session_preload_libraries": libraryList,
		"lc_messages":               localeName,
		"lc_monetary":               localeName,
		"lc_numeric":                localeName,
		"lc_time":                   localeName,
		"timezone":                  zoneName,
		"log_timezone":              zoneName,
		"timezone_abbreviations":    zoneName,
	},
}

// localeName checks a locale setting (lc_messages...): the C library
// reads a name with a '/' as the path of a locale file.
func localeName(v string) string {
	if strings.Contains(v, "/") {
		return "must be a locale name, such as en_US.UTF-8 or C: a name with '/' is a file's path"
	}
	return ""
}

// zoneName checks a time zone setting (timezone, log_timezone,
// timezone_abbreviations): a name the server looks up in its own time zone
// files, not a path out of them.
func zoneName(v string) string {
	if strings.HasPrefix(strings.TrimSpace(v), "/") || strings.Contains(v, "..") {
		return "must be a time zone name, such as UTC or Europe/Paris: '..' and a leading '/' would name a file outside the server's time zone data"
	}
	return ""
}

// modernTLS are the TLS versions a postgres server may be limited to
// (PostgreSQL's names, which it matches case-insensitively).
var modernTLS = []string{"tlsv1.2", "tlsv1.3"}

// minTLSVersion checks ssl_min_protocol_version: TLS 1.2 at least, as
// PostgreSQL's default.
func minTLSVersion(v string) string {
	if slices.Contains(modernTLS, strings.ToLower(strings.TrimSpace(v))) {
		return ""
	}
	return "must be TLSv1.2 or TLSv1.3: TLS 1.0 and 1.1 have known attacks and no support in current clients (PostgreSQL's default is TLSv1.2)"
}

// maxTLSVersion checks ssl_max_protocol_version: none, or TLS 1.2 or 1.3.
func maxTLSVersion(v string) string {
	v = strings.ToLower(strings.TrimSpace(v))
	if v == "" || slices.Contains(modernTLS, v) {
		return ""
	}
	return "must be empty (no maximum), TLSv1.2 or TLSv1.3: a lower maximum would hold every connection to TLS 1.0 or 1.1, which have known attacks"
}

// scramOnly checks password_encryption: SCRAM only.
func scramOnly(v string) string {
	if strings.EqualFold(strings.TrimSpace(v), "scram-sha-256") {
		return ""
	}
	return "must be scram-sha-256: an md5 hash of a password is as good as the password to whoever reads it, and falls to brute force"
}

// strongCiphers checks ssl_ciphers, an OpenSSL cipher list for TLS 1.2
// and older: it may not add NULL (unencrypted), anonymous (no server
// certificate: aNULL, ADH, AECDH) or EXPORT suites, nor lower OpenSSL's
// security level to 0, and it must remove the anonymous suites with
// !aNULL, as PostgreSQL's default does (HIGH, MEDIUM and ALL include
// them).
func strongCiphers(v string) string {
	const fix = "; exclude them as PostgreSQL's default does, HIGH:MEDIUM:+3DES:!aNULL"
	removesAnonymous := false
	for tok := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ':' || r == ',' || r == ' ' }) {
		switch {
		case strings.EqualFold(tok, "!aNULL"):
			removesAnonymous = true
			continue
		case strings.HasPrefix(tok, "!"), strings.HasPrefix(tok, "-"), strings.HasPrefix(tok, "+"):
			continue // removes suites, or moves the ones already listed
		case strings.HasPrefix(tok, "@"):
			if strings.EqualFold(strings.ReplaceAll(tok, " ", ""), "@SECLEVEL=0") {
				return fmt.Sprintf("%s allows every suite, however weak: remove it", tok)
			}
			continue
		}
		for part := range strings.SplitSeq(tok, "+") {
			u := strings.ToUpper(part)
			switch {
			case strings.Contains(u, "NULL"):
				return fmt.Sprintf("%s adds suites without encryption (eNULL) or without a server certificate (aNULL)%s", part, fix)
			case strings.HasPrefix(u, "EXP"):
				return fmt.Sprintf("%s adds EXPORT suites, of 40- and 56-bit keys%s", part, fix)
			case strings.HasPrefix(u, "ADH"), strings.HasPrefix(u, "AECDH"):
				return fmt.Sprintf("%s adds anonymous suites, without a server certificate, open to a man in the middle%s", part, fix)
			case strings.HasPrefix(u, "COMPLEMENTOF"):
				return fmt.Sprintf("%s adds the suites OpenSSL leaves out for being unencrypted or anonymous%s", part, fix)
			}
		}
	}
	if !removesAnonymous {
		return "must remove the anonymous suites, which have no server certificate and are open to a man in the middle, with !aNULL, as PostgreSQL's default does: HIGH:MEDIUM:+3DES:!aNULL"
	}
	return ""
}

// libraryNameRE is a library named as the server finds it in its
// library directory: no directory, no $libdir.
var libraryNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)

// deniedLibraries are libraries of PostgreSQL's own image that run
// commands or write files when loaded.
var deniedLibraries = map[string]string{
	"basebackup_to_shell": "runs a shell command (basebackup_to_shell.command) for base backups",
	"basic_archive":       "copies WAL into a directory it is given (basic_archive.archive_directory); set spec.backup to archive WAL",
}

// libraryList checks a list of libraries to preload (shared_, local_ and
// session_preload_libraries): comma-separated, each optionally in double
// quotes, each a bare name that the server loads from its image's library
// directory (dynamic_library_path is refused, so it stays $libdir) and not
// one of deniedLibraries. The libraries are then code of the image, which
// the cluster's image policy already governs.
func libraryList(v string) string {
	if strings.TrimSpace(v) == "" {
		return ""
	}
	for elem := range strings.SplitSeq(v, ",") {
		name := strings.TrimSpace(elem)
		if len(name) >= 2 && strings.HasPrefix(name, `"`) && strings.HasSuffix(name, `"`) {
			name = strings.ReplaceAll(name[1:len(name)-1], `""`, `"`)
		}
		switch {
		case !libraryNameRE.MatchString(name) || strings.Contains(name, ".."):
			return fmt.Sprintf("%q: must list libraries by bare name, such as pg_stat_statements or auto_explain, which the server loads from its image's library directory: a path or $libdir could load any file as code", name)
		case deniedLibraries[strings.ToLower(name)] != "":
			return fmt.Sprintf("%s %s: remove it", name, deniedLibraries[strings.ToLower(name)])
		}
	}
	return ""
}
