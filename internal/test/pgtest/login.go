package pgtest

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
)

// LoginFromLoopback logs in as user with password to database on the
// server at host:port over TCP from 127.0.0.1, without TLS, where
// `kubectl port-forward` connects from inside a pod, and asks who it is:
// nil only when the server let the login in.
func LoginFromLoopback(host string, port int, user, password, database string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=%s port=%d dbname=%s sslmode=disable connect_timeout=5", host, port, database))
	if err != nil {
		return err
	}
	cfg.User, cfg.Password = user, password
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	cfg.DialFunc = d.DialContext
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	var who string
	return c.QueryRow(ctx, "SELECT current_user").Scan(&who)
}
