package desired

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/test/fixture"
)

func TestServices(t *testing.T) {
	pgPort := corev1.ServicePort{Name: "postgres", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromString("postgres")}
	tests := []struct {
		name          string
		build         func(*dbv1.Database) *corev1ac.ServiceApplyConfiguration
		db            *dbv1.Database
		wantName      string
		wantRole      string // the role label the selector adds, "" for none
		wantClusterIP string
		wantNotReady  bool
		wantPort      corev1.ServicePort
	}{
		{
			name:     "the postgres client Service exposes the postgres port by name and selects the primary",
			build:    ClientService,
			db:       newDatabase(dbv1.EnginePostgres),
			wantName: "orders",
			wantRole: "primary",
			wantPort: pgPort,
		},
		{
			name:     "the postgres read-only Service selects the replicas on the client Service's port",
			build:    ReadOnlyService,
			db:       newDatabase(dbv1.EnginePostgres),
			wantName: "orders-ro",
			wantRole: "replica",
			wantPort: pgPort,
		},
		{
			name:     "the read-only Service follows spec.port",
			build:    ReadOnlyService,
			db:       newDatabase(dbv1.EnginePostgres, fixture.WithPort(6543)),
			wantName: "orders-ro",
			wantRole: "replica",
			wantPort: corev1.ServicePort{Name: "postgres", Protocol: corev1.ProtocolTCP, Port: 6543, TargetPort: intstr.FromString("postgres")},
		},
		{
			name:          "the postgres headless Service has no cluster IP, publishes unready pods and selects every role",
			build:         HeadlessService,
			db:            newDatabase(dbv1.EnginePostgres),
			wantName:      "orders-headless",
			wantClusterIP: "None",
			wantNotReady:  true,
			wantPort:      pgPort,
		},
		{
			name:     "the mysql client Service follows spec.port and selects every pod: mysql has no roles",
			build:    ClientService,
			db:       newDatabase(dbv1.EngineMySQL, fixture.WithPort(3307)),
			wantName: "orders",
			wantPort: corev1.ServicePort{Name: "mysql", Protocol: corev1.ProtocolTCP, Port: 3307, TargetPort: intstr.FromString("mysql")},
		},
		{
			name:          "the mysql headless Service has no cluster IP and publishes unready pods",
			build:         HeadlessService,
			db:            newDatabase(dbv1.EngineMySQL),
			wantName:      "orders-headless",
			wantClusterIP: "None",
			wantNotReady:  true,
			wantPort:      corev1.ServicePort{Name: "mysql", Protocol: corev1.ProtocolTCP, Port: 3306, TargetPort: intstr.FromString("mysql")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := convert[corev1.Service](t, tt.build(tt.db))
			checkMeta(t, svc.ObjectMeta, tt.db, tt.wantName, ComponentDatabase)
			if svc.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("type = %q, want ClusterIP", svc.Spec.Type)
			}
			if svc.Spec.ClusterIP != tt.wantClusterIP {
				t.Errorf("clusterIP = %q, want %q", svc.Spec.ClusterIP, tt.wantClusterIP)
			}
			if svc.Spec.PublishNotReadyAddresses != tt.wantNotReady {
				t.Errorf("publishNotReadyAddresses = %v, want %v", svc.Spec.PublishNotReadyAddresses, tt.wantNotReady)
			}
			wantSelector := SelectorLabels(tt.db)
			if tt.wantRole != "" {
				wantSelector["dbkeeper.io/role"] = tt.wantRole
			}
			if !maps.Equal(svc.Spec.Selector, wantSelector) {
				t.Errorf("selector = %v, want %v", svc.Spec.Selector, wantSelector)
			}
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0] != tt.wantPort {
				t.Errorf("ports = %+v, want [%+v]", svc.Spec.Ports, tt.wantPort)
			}
		})
	}
}

func TestServicesList(t *testing.T) {
	tests := map[dbv1.Engine][]string{
		dbv1.EnginePostgres: {"orders", "orders-headless", "orders-ro"},
		dbv1.EngineMySQL:    {"orders", "orders-headless"},
	}
	for engine, want := range tests {
		t.Run(string(engine), func(t *testing.T) {
			var got []string
			for _, svc := range Services(newDatabase(engine)) {
				got = append(got, *svc.Name)
			}
			if !slices.Equal(got, want) {
				t.Errorf("Services = %q, want %q", got, want)
			}
		})
	}
}

func TestPortConflicts(t *testing.T) {
	pg := func(port int32) corev1.ServicePort {
		return corev1.ServicePort{Name: "postgres", Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromString("postgres")}
	}
	metrics := corev1.ServicePort{Name: "metrics", Protocol: corev1.ProtocolTCP, Port: 9187, TargetPort: intstr.FromInt32(9187)}
	tests := []struct {
		name        string
		live        []corev1.ServicePort
		wantPorts   []corev1.ServicePort
		wantRemoved []corev1.ServicePort
	}{
		{name: "dbkeeper's own port does not conflict", live: []corev1.ServicePort{pg(5432)}},
		{name: "another writer's port of another name does not conflict", live: []corev1.ServicePort{pg(5432), metrics}},
		{name: "a changed target port does not conflict: apply restores it", live: []corev1.ServicePort{{Name: "postgres", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromInt32(1)}}},
		{name: "no live port does not conflict", live: nil},
		{
			name: "a renumbered port is replaced by dbkeeper's, so the Service never has no port",
			live: []corev1.ServicePort{pg(20000)}, wantPorts: []corev1.ServicePort{pg(5432)}, wantRemoved: []corev1.ServicePort{pg(20000)},
		},
		{
			name: "a renumbered port goes and another writer's port stays",
			live: []corev1.ServicePort{metrics, pg(20000)}, wantPorts: []corev1.ServicePort{metrics, pg(5432)}, wantRemoved: []corev1.ServicePort{pg(20000)},
		},
		{
			name:      "a port of dbkeeper's name with another protocol conflicts",
			live:      []corev1.ServicePort{{Name: "postgres", Protocol: corev1.ProtocolUDP, Port: 5432}},
			wantPorts: []corev1.ServicePort{pg(5432)}, wantRemoved: []corev1.ServicePort{{Name: "postgres", Protocol: corev1.ProtocolUDP, Port: 5432}},
		},
		{
			name:        "dbkeeper's port number under another name is kept for apply to rename",
			live:        []corev1.ServicePort{{Name: "other", Protocol: corev1.ProtocolTCP, Port: 5432}, pg(20000)},
			wantPorts:   []corev1.ServicePort{{Name: "other", Protocol: corev1.ProtocolTCP, Port: 5432}},
			wantRemoved: []corev1.ServicePort{pg(20000)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ports, removed := PortConflicts(ClientService(newDatabase(dbv1.EnginePostgres)), tt.live)
			if !slices.Equal(ports, tt.wantPorts) || !slices.Equal(removed, tt.wantRemoved) {
				t.Errorf("PortConflicts = %+v, removed %+v; want %+v, removed %+v", ports, removed, tt.wantPorts, tt.wantRemoved)
			}
		})
	}
}
