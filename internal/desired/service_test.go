package desired

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	dbv1 "github.com/dbkeeper/dbkeeper/api/v1alpha1"
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
			db:       newDatabase(dbv1.EngineMySQL, withPort(3307)),
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
