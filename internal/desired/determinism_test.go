package desired

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
)

// twentyParameters returns a parameters map large enough that Go's map
// iteration order differs between builds.
func twentyParameters() map[string]string {
	params := make(map[string]string, 20)
	for i := range 20 {
		params[fmt.Sprintf("setting_%02d", 19-i)] = fmt.Sprint(i)
	}
	return params
}

func TestBuildersAreDeterministic(t *testing.T) {
	builders := map[string]func(*dbv1.Database) any{
		"Secret":          func(db *dbv1.Database) any { return Secret(db, "pw") },
		"ClientService":   func(db *dbv1.Database) any { return ClientService(db) },
		"HeadlessService": func(db *dbv1.Database) any { return HeadlessService(db) },
		"StatefulSet":     func(db *dbv1.Database) any { return StatefulSet(db) },
	}
	databases := map[string]func(dbv1.Engine) *dbv1.Database{
		"a defaulted Database": func(e dbv1.Engine) *dbv1.Database { return newDatabase(e) },
		"a Database with 20 parameters, 3 replicas and a storage class": func(e dbv1.Engine) *dbv1.Database {
			return newDatabase(e, withParameters(twentyParameters()), withReplicas(3), withStorageClass("fast"))
		},
	}
	for dbName, newDB := range databases {
		for _, engine := range engines {
			for kind, build := range builders {
				t.Run(fmt.Sprintf("the %s of %s (%s) encodes identically every time", kind, dbName, engine), func(t *testing.T) {
					first, err := json.Marshal(build(newDB(engine)))
					if err != nil {
						t.Fatal(err)
					}
					for range 50 {
						again, err := json.Marshal(build(newDB(engine)))
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(first, again) {
							t.Fatalf("builds differ:\n%s\n%s", first, again)
						}
					}
				})
			}
		}
	}
}

func TestParametersAreSortedInArgs(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres, withParameters(twentyParameters()))
	args := onlyContainer(t, statefulSet(t, db)).Args
	want := make([]string, 0, 42)
	want = append(want, "-c", "port=5432")
	for i := range 20 {
		want = append(want, "-c", fmt.Sprintf("setting_%02d=%d", i, 19-i))
	}
	if fmt.Sprint(args) != fmt.Sprint(want) {
		t.Errorf("args = %q, want %q", args, want)
	}
}

func TestBuildersDoNotPanicOnAnUndefaultedDatabase(t *testing.T) {
	for _, engine := range []dbv1.Engine{dbv1.EnginePostgres, dbv1.EngineMySQL, "", "oracle"} {
		t.Run(fmt.Sprintf("engine %q", engine), func(t *testing.T) {
			db := &dbv1.Database{}
			db.Name, db.Namespace, db.Spec.Engine = "orders", "shop", engine
			for _, ac := range []any{Secret(db, "pw"), ClientService(db), HeadlessService(db), StatefulSet(db)} {
				if _, err := json.Marshal(ac); err != nil {
					t.Errorf("encoding %T: %v", ac, err)
				}
			}
		})
	}
}
