package rules

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/instance"
)

// identifierRE is the syntax of database and user names: identifiers both
// engines accept without quoting.
var identifierRE = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// identifierSyntax describes identifierRE in error messages.
const identifierSyntax = "must start with a lowercase letter or '_' and contain only lowercase letters, digits and '_'"

// identifierRules are the engine's length limit and reserved names for one
// kind of identifier.
type identifierRules struct {
	maxLength func(*catalog.EngineInfo) int
	// reserved returns the error detail of a name the engine reserves, ""
	// when it does not reserve it.
	reserved func(*catalog.EngineInfo, string) string
}

var (
	databaseNameRules = identifierRules{
		maxLength: func(e *catalog.EngineInfo) int { return e.MaxDatabaseNameLength },
		reserved: func(e *catalog.EngineInfo, name string) string {
			if slices.Contains(e.ReservedDatabaseNames, name) {
				return fmt.Sprintf("is reserved by %s", e.Name)
			}
			return ""
		},
	}
	usernameRules = identifierRules{
		maxLength: func(e *catalog.EngineInfo) int { return e.MaxUsernameLength },
		reserved: func(e *catalog.EngineInfo, name string) string {
			if slices.Contains(e.ReservedUsernames, name) {
				return fmt.Sprintf("is reserved by %s", e.Name)
			}
			if e.Name == dbv1.EnginePostgres && strings.HasPrefix(name, "pg_") {
				return "is reserved by postgres: role names starting with pg_ are for its predefined roles"
			}
			if e.Name == dbv1.EnginePostgres && name == instance.MonitorRole {
				return "is reserved by dbkeeper: its agents' monitoring role"
			}
			return ""
		},
	}
)

// validateIdentifier checks a database or user name: set, an identifier the
// engine accepts without quoting, within the engine's length limit, and not
// one the engine reserves.
func validateIdentifier(path *field.Path, name string, engine *catalog.EngineInfo, rules identifierRules, errs *field.ErrorList) {
	if name == "" {
		*errs = append(*errs, field.Required(path, ""))
		return
	}
	valid := true
	if engine != nil && len(name) > rules.maxLength(engine) {
		err := field.TooLong(path, name, rules.maxLength(engine))
		err.Detail += " for " + string(engine.Name)
		*errs = append(*errs, err)
		valid = false
	}
	if !identifierRE.MatchString(name) {
		*errs = append(*errs, field.Invalid(path, name, identifierSyntax))
		valid = false
	}
	if valid && engine != nil {
		if detail := rules.reserved(engine, name); detail != "" {
			*errs = append(*errs, field.Invalid(path, name, detail))
		}
	}
}
