package rules_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/catalog"
	"github.com/dbkeeper/dbkeeper/internal/rules"
)

// pgBin is where the PostgreSQL 15 server the tests run is installed
// (make host-packages).
const pgBin = "/usr/lib/postgresql/15/bin"

// reviewedStringSettings are the postgres settings with a text value that
// users may set freely, each with why its value can be neither a command,
// nor a file or directory, nor code to load. Every other setting with a
// text value is refused or allowed within rules on its value.
var reviewedStringSettings = map[string]string{
	"bonjour_name":                "a service name; the images have no Bonjour",
	"client_encoding":             "an encoding's name",
	"cluster_name":                "a name in the process title",
	"datestyle":                   "a date format",
	"default_table_access_method": "an access method, which only the superuser creates",
	"default_tablespace":          "a tablespace, which only the superuser creates",
	"default_text_search_config":  "a text search configuration, an object of the database",
	"event_source":                "the Windows event log's name; the images run Linux",
	"log_destination":             "where the log goes: stderr (kubectl logs), csvlog and jsonlog into log_directory, which is refused, or syslog",
	"log_line_prefix":             "a format of the log lines",
	"search_path":                 "schemas, not files",
	"ssl_ecdh_curve":              "a curve's name",
	"syslog_ident":                "the program's name in syslog messages",
	"temp_tablespaces":            "tablespaces, which only the superuser creates",
}

// TestPostgresRefusesEverySettingOfItsKind asks a real PostgreSQL server
// for its settings (postgres --describe-config) and checks that each one
// whose value is text is refused (with its reason), allowed within rules
// on its value, or reviewed as harmless (reviewedStringSettings): a setting
// a new version adds fails the test until it is looked at, so that no
// command, file or library setting slips past admission. The numbers,
// booleans and enums cannot name a command or file; those that weaken
// security (lo_compat_privileges, ssl_min_protocol_version...) are in
// TestDangerousParametersAreRefused.
func TestPostgresRefusesEverySettingOfItsKind(t *testing.T) {
	if testing.Short() {
		t.Skip("runs PostgreSQL: not in -short")
	}
	if _, err := os.Stat(filepath.Join(pgBin, "postgres")); err != nil {
		t.Skipf("PostgreSQL 15 is not installed (%s is missing): run `make host-packages`", pgBin)
	}
	out, err := exec.Command(filepath.Join(pgBin, "postgres"), "--describe-config").Output()
	if err != nil {
		t.Fatalf("postgres --describe-config: %v", err)
	}
	pg, _ := catalog.LookupEngine(dbv1.EnginePostgres)
	ruled := rules.ParameterValueRules[dbv1.EnginePostgres]
	texts := 0
	for line := range strings.Lines(string(out)) {
		// name, context, group, type, reset value, min, max, short and
		// long description, tab-separated.
		f := strings.Split(strings.TrimRight(line, "\n"), "\t")
		if len(f) < 8 {
			t.Fatalf("postgres --describe-config: a line of %d fields: %q", len(f), line)
		}
		if f[3] != "STRING" {
			continue
		}
		texts++
		name := catalog.NormalizeParameter(f[0])
		_, refused := rules.RefusedParameter(pg, name)
		_, valueRuled := ruled[name]
		_, reviewed := reviewedStringSettings[name]
		switch {
		case refused && (valueRuled || reviewed):
			t.Errorf("%s is refused, and yet allowed within rules or reviewed as harmless", name)
		case !refused && !valueRuled && !reviewed:
			t.Errorf("%s (%s: %s) is a text setting neither refused, nor allowed within rules on its value, nor reviewed: "+
				"refuse it if its value can be a command, a file or directory, or code to load, else add it to reviewedStringSettings saying why",
				name, f[2], f[7])
		}
	}
	if texts < 50 {
		t.Fatalf("postgres --describe-config listed %d text settings: expected about 60", texts)
	}
	for name := range reviewedStringSettings {
		if !strings.Contains(strings.ToLower(string(out)), name+"\t") {
			t.Errorf("%s is reviewed but the server has no such setting", name)
		}
	}
}
