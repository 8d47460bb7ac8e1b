package desired

import (
	"maps"
	"net/url"
	"testing"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestNames(t *testing.T) {
	db := newDatabase(dbv1.EnginePostgres)
	tests := map[string]struct {
		got, want string
	}{
		"the Secret is <name>-credentials":          {SecretName(db), "orders-credentials"},
		"the headless Service is <name>-headless":   {HeadlessServiceName(db), "orders-headless"},
		"the read-only Service is <name>-ro":        {ReadOnlyServiceName(db), "orders-ro"},
		"the client Service is named like the db":   {ClientServiceName(db), "orders"},
		"the StatefulSet is named like the db":      {StatefulSetName(db), "orders"},
		"the host is the client Service's DNS name": {Host(db), "orders.shop.svc"},
		"the endpoint is host:port":                 {Endpoint(db), "orders.shop.svc:5432"},
		"the endpoint follows spec.port":            {Endpoint(newDatabase(dbv1.EngineMySQL, fixture.WithPort(13306))), "orders.shop.svc:13306"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestLabels(t *testing.T) {
	tests := []struct {
		name      string
		db        *dbv1.Database
		component string
		want      map[string]string
	}{
		{
			name:      "postgres database labels name the engine and the instance",
			db:        newDatabase(dbv1.EnginePostgres),
			component: ComponentDatabase,
			want: map[string]string{
				"app.kubernetes.io/name":       "postgres",
				"app.kubernetes.io/instance":   "orders",
				"app.kubernetes.io/managed-by": "dbkeeper",
				"app.kubernetes.io/component":  "database",
			},
		},
		{
			name:      "mysql credentials labels carry the credentials component",
			db:        newDatabase(dbv1.EngineMySQL),
			component: ComponentCredentials,
			want: map[string]string{
				"app.kubernetes.io/name":       "mysql",
				"app.kubernetes.io/instance":   "orders",
				"app.kubernetes.io/managed-by": "dbkeeper",
				"app.kubernetes.io/component":  "credentials",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Labels(tt.db, tt.component); !maps.Equal(got, tt.want) {
				t.Errorf("Labels = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSelectorLabels(t *testing.T) {
	want := map[string]string{
		"app.kubernetes.io/instance":   "orders",
		"app.kubernetes.io/managed-by": "dbkeeper",
		"app.kubernetes.io/component":  "database",
	}
	tests := map[string]*dbv1.Database{
		"postgres selects by instance, manager and component": newDatabase(dbv1.EnginePostgres),
		"mysql selects by the same labels":                    newDatabase(dbv1.EngineMySQL),
	}
	for name, db := range tests {
		t.Run(name, func(t *testing.T) {
			got := SelectorLabels(db)
			if !maps.Equal(got, want) {
				t.Errorf("SelectorLabels = %v, want %v", got, want)
			}
			labels := Labels(db, ComponentDatabase)
			for k, v := range got {
				if labels[k] != v {
					t.Errorf("pod label %s = %q, selector wants %q", k, labels[k], v)
				}
			}
		})
	}
	t.Run("a new map is returned on every call", func(t *testing.T) {
		db := newDatabase(dbv1.EnginePostgres)
		SelectorLabels(db)[LabelInstance] = "changed"
		Labels(db, ComponentDatabase)[LabelInstance] = "changed"
		if got := SelectorLabels(db)[LabelInstance]; got != "orders" {
			t.Errorf("selector instance = %q after changing a returned map", got)
		}
	})
}

func TestURI(t *testing.T) {
	tests := []struct {
		name     string
		db       *dbv1.Database
		password string
		want     string
	}{
		{
			name:     "postgres uses the postgresql scheme",
			db:       newDatabase(dbv1.EnginePostgres),
			password: "s3cret",
			want:     "postgresql://app:s3cret@orders.shop.svc:5432/app?sslmode=verify-full",
		},
		{
			name:     "mysql uses the mysql scheme and its port",
			db:       newDatabase(dbv1.EngineMySQL),
			password: "s3cret",
			want:     "mysql://app:s3cret@orders.shop.svc:3306/app",
		},
		{
			name:     "reserved characters in the password are percent-encoded",
			db:       newDatabase(dbv1.EnginePostgres),
			password: "p@ss:w/rd?#[]%+ &=",
			want:     "postgresql://app:p%40ss%3Aw%2Frd%3F%23%5B%5D%25%2B%20%26%3D@orders.shop.svc:5432/app?sslmode=verify-full",
		},
		{
			name:     "unreserved characters are left alone",
			db:       newDatabase(dbv1.EnginePostgres),
			password: "aZ09-._~",
			want:     "postgresql://app:aZ09-._~@orders.shop.svc:5432/app?sslmode=verify-full",
		},
		{
			name:     "user and database names are escaped too",
			db:       newDatabase(dbv1.EnginePostgres, fixture.WithUsername("app$user"), fixture.WithDatabaseName("my db")),
			password: "x",
			want:     "postgresql://app%24user:x@orders.shop.svc:5432/my%20db?sslmode=verify-full",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := URI(tt.db, tt.password)
			if got != tt.want {
				t.Fatalf("URI = %q, want %q", got, tt.want)
			}
			u, err := url.Parse(got)
			if err != nil {
				t.Fatalf("URI does not parse: %v", err)
			}
			if p, _ := u.User.Password(); p != tt.password {
				t.Errorf("password read back = %q, want %q", p, tt.password)
			}
			if u.User.Username() != tt.db.Spec.Username {
				t.Errorf("user read back = %q, want %q", u.User.Username(), tt.db.Spec.Username)
			}
			if u.Path != "/"+tt.db.Spec.DatabaseName {
				t.Errorf("path read back = %q, want %q", u.Path, "/"+tt.db.Spec.DatabaseName)
			}
		})
	}
}
