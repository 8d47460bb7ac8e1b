package desired

import (
	"encoding/json"
	"fmt"
	"testing"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
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

// TestParametersAreSortedInArgs is what keeps the builders deterministic:
// every other collection they build from a map is a map itself, encoded
// sorted.
func TestParametersAreSortedInArgs(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres, fixture.WithParameters(twentyParameters()))
	args := onlyContainer(t, statefulSet(t, db)).Args
	want := make([]string, 0, 46)
	want = append(want, "-c", "port=5432", "-c", "wal_log_hints=on", "-c", "wal_receiver_status_interval=1s", "-c", "max_slot_wal_keep_size=256MB")
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
			for _, ac := range []any{Secret(db, Credentials{Password: "pw"}), ClientService(db), HeadlessService(db), ReadOnlyService(db), StatefulSet(db, testOptions)} {
				if _, err := json.Marshal(ac); err != nil {
					t.Errorf("encoding %T: %v", ac, err)
				}
			}
		})
	}
}
