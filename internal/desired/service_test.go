package desired

import (
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
	"github.com/dbkeeper/dbkeeper/internal/fixture"
)

func TestServices(t *testing.T) {
	tests := []struct {
		name          string
		db            *dbv1.Database
		wantName      string
		wantClusterIP string
		wantNotReady  bool
		wantPort      corev1.ServicePort
	}{
		{
			name:     "the postgres client Service exposes the postgres port by name",
			db:       newDatabase(dbv1.EnginePostgres),
			wantName: "orders",
			wantPort: corev1.ServicePort{Name: "postgres", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromString("postgres")},
		},
		{
			name:          "the postgres headless Service has no cluster IP and publishes unready pods",
			db:            newDatabase(dbv1.EnginePostgres),
			wantName:      "orders-headless",
			wantClusterIP: "None",
			wantNotReady:  true,
			wantPort:      corev1.ServicePort{Name: "postgres", Protocol: corev1.ProtocolTCP, Port: 5432, TargetPort: intstr.FromString("postgres")},
		},
		{
			name:     "the mysql client Service follows spec.port",
			db:       newDatabase(dbv1.EngineMySQL, fixture.WithPort(3307)),
			wantName: "orders",
			wantPort: corev1.ServicePort{Name: "mysql", Protocol: corev1.ProtocolTCP, Port: 3307, TargetPort: intstr.FromString("mysql")},
		},
		{
			name:          "the mysql headless Service has no cluster IP and publishes unready pods",
			db:            newDatabase(dbv1.EngineMySQL),
			wantName:      "orders-headless",
			wantClusterIP: "None",
			wantNotReady:  true,
			wantPort:      corev1.ServicePort{Name: "mysql", Protocol: corev1.ProtocolTCP, Port: 3306, TargetPort: intstr.FromString("mysql")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ac := ClientService(tt.db)
			if tt.wantName == HeadlessServiceName(tt.db) {
				ac = HeadlessService(tt.db)
			}
			svc := convert[corev1.Service](t, ac)
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
			if !maps.Equal(svc.Spec.Selector, SelectorLabels(tt.db)) {
				t.Errorf("selector = %v, want %v", svc.Spec.Selector, SelectorLabels(tt.db))
			}
			if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0] != tt.wantPort {
				t.Errorf("ports = %+v, want [%+v]", svc.Spec.Ports, tt.wantPort)
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
