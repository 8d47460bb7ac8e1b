package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Roles of a data directory dbkeeper set up (docs/security.md):
//
//   - the superuser, Config.User ("postgres"), the bootstrap role of a
//     directory initialised since the application user stopped being the
//     superuser; only the agent logs in as it, over the Unix socket;
//   - the application user, Config.AppUser: LOGIN and nothing else, the
//     owner of Config.AppDatabase and of everything in it;
//   - the replication role, Config.ReplUser (ensureReplicationRole).
//
// A directory made by an earlier release has the application user as its
// bootstrap superuser (the role with OID 10), which PostgreSQL 16 and later
// refuse to make an ordinary role and whose objects REASSIGN OWNED refuses
// to move. ensureRoles migrates it: it gives what that role owns in the
// application's database to a new role, then, in one transaction, renames
// the old role to legacyBootstrapRole (NOLOGIN) and the new one to the
// application user's name, with the same password. Clients log in as
// before; the sessions the old role still had are ended, since they kept
// its superuser rights.
const (
	// legacyBootstrapRole is the name the old bootstrap superuser gets.
	legacyBootstrapRole = "dbkeeper_bootstrap"
	// stagingAppRole is the new application role while it receives the
	// old one's objects, before it takes the application user's name.
	stagingAppRole = "dbkeeper_app_migrating"
)

// bootstrapRoleOID is the OID of the role initdb creates.
const bootstrapRoleOID = 10

// appRoleAttributes are the application user's attributes: it logs in and
// may do nothing a superuser, a role administrator or a replication
// client may.
const appRoleAttributes = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"

// EnsureRoles sets up the roles on a primary (see the constants above). It
// is idempotent, and a migration interrupted anywhere is finished by the
// next call. No password is logged or put in an error, nor sent to the
// server: a role gets its password's SCRAM verifier (passwordClause).
func (s *Server) EnsureRoles(ctx context.Context) error {
	if s.cfg.AppUser == "" {
		return nil // a configuration without an application user (tests)
	}
	r := roleNames{super: s.cfg.User, app: s.cfg.AppUser, database: s.cfg.AppDatabase}
	return ensureRoles(ctx, s.db, r, s.cfg.Password, s.cfg.AppPassword, func(database string) string {
		return SocketConnString(s.cfg.SocketDir, s.cfg.Port, s.cfg.User, database)
	}, s.logf)
}

// roleNames are the roles and the database ensureRoles sets up.
type roleNames struct {
	super, app, database string
}

func ensureRoles(ctx context.Context, d *DB, r roleNames, superPassword, appPassword string,
	connString func(database string) string, logf func(string, ...any)) error {
	ident := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	// The superuser: made while connected as the legacy bootstrap role
	// when it does not exist, then the connection is made again as it.
	var current string
	err := d.With(ctx, 10*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		if err := c.QueryRow(ctx, "SELECT current_user").Scan(&current); err != nil {
			return err
		}
		verb := "ALTER"
		if current != r.super {
			verb = "CREATE"
			logf("the superuser %s does not exist (a data directory of an earlier release): creating it", r.super)
		}
		pw, err := passwordClause(ctx, c, r.super, superPassword)
		if err != nil {
			return err
		}
		_, err = c.Exec(ctx, fmt.Sprintf("%s ROLE %s WITH SUPERUSER LOGIN%s", verb, ident(r.super), pw))
		return err
	})
	if err != nil {
		return fmt.Errorf("the superuser %s: %w", r.super, err)
	}
	if current != r.super {
		d.Close()
	}

	var appOID uint32
	var appExists bool
	err = d.With(ctx, 10*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		err := c.QueryRow(ctx, "SELECT oid FROM pg_roles WHERE rolname = $1", r.app).Scan(&appOID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		appExists = err == nil
		return err
	})
	if err != nil {
		return fmt.Errorf("the application user %s: %w", r.app, err)
	}
	if appExists && appOID == bootstrapRoleOID {
		if err := migrateBootstrapApp(ctx, d, r, appPassword, connString, logf); err != nil {
			return fmt.Errorf("moving the application user %s off the bootstrap superuser: %w", r.app, err)
		}
	}
	err = d.With(ctx, time.Minute, func(ctx context.Context, c *pgx.Conn) error {
		verb := "ALTER"
		if !appExists {
			verb = "CREATE"
		}
		pw, err := passwordClause(ctx, c, r.app, appPassword)
		if err != nil {
			return err
		}
		if _, err := c.Exec(ctx, fmt.Sprintf("%s ROLE %s WITH %s%s", verb, ident(r.app), appRoleAttributes, pw)); err != nil {
			return fmt.Errorf("the application user %s: %w", r.app, err)
		}
		var owner string
		err = c.QueryRow(ctx, "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = $1", r.database).Scan(&owner)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if _, err := c.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s OWNER %s", ident(r.database), ident(r.app))); err != nil {
				return fmt.Errorf("creating the database %s: %w", r.database, err)
			}
			logf("created the database %s owned by %s", r.database, r.app)
		case err != nil:
			return err
		case owner != r.app:
			if _, err := c.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s OWNER TO %s", ident(r.database), ident(r.app))); err != nil {
				return fmt.Errorf("giving the database %s to %s: %w", r.database, r.app, err)
			}
			logf("gave the database %s to %s (owned by %s)", r.database, r.app, owner)
		}
		// The application user connects to its own database only.
		for _, other := range []string{"postgres", "template1"} {
			if other == r.database {
				continue
			}
			if _, err := c.Exec(ctx, fmt.Sprintf("REVOKE CONNECT ON DATABASE %s FROM PUBLIC", ident(other))); err != nil {
				return fmt.Errorf("revoking CONNECT on %s: %w", other, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Before PostgreSQL 15 the public schema belongs to the bootstrap
	// role, not to the database's owner.
	return withDatabase(ctx, connString(r.database), func(ctx context.Context, c *pgx.Conn) error {
		var owner uint32
		err := c.QueryRow(ctx, "SELECT nspowner FROM pg_namespace WHERE nspname = 'public'").Scan(&owner)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && owner != bootstrapRoleOID {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = c.Exec(ctx, "ALTER SCHEMA public OWNER TO "+ident(r.app))
		return err
	})
}

// migrateBootstrapApp moves the application user off the bootstrap
// superuser (see the constants above).
func migrateBootstrapApp(ctx context.Context, d *DB, r roleNames, appPassword string,
	connString func(database string) string, logf func(string, ...any)) error {
	ident := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	logf("the application user %s is the bootstrap superuser (a data directory of an earlier release): making it an ordinary role", r.app)
	err := d.With(ctx, 10*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		var exists bool
		if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)", stagingAppRole).Scan(&exists); err != nil || exists {
			return err
		}
		_, err := c.Exec(ctx, "CREATE ROLE "+ident(stagingAppRole)+" NOLOGIN")
		return err
	})
	if err != nil {
		return fmt.Errorf("creating %s: %w", stagingAppRole, err)
	}
	// What the old role owns in the application's database goes to the
	// new one while the old one still works, so no client ever logs in
	// as a role that lacks its objects.
	var databaseExists bool
	err = d.With(ctx, 10*time.Second, func(ctx context.Context, c *pgx.Conn) error {
		return c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", r.database).Scan(&databaseExists)
	})
	if err != nil {
		return err
	}
	if databaseExists {
		err := withDatabase(ctx, connString(r.database), func(ctx context.Context, c *pgx.Conn) error {
			var moved int
			if err := c.QueryRow(ctx, countBootstrapObjects).Scan(&moved); err != nil {
				return err
			}
			if _, err := c.Exec(ctx, strings.Replace(giveBootstrapObjects, "$target", QuoteLiteral(stagingAppRole), 1)); err != nil {
				return err
			}
			logf("gave the %d objects the bootstrap role owned in %s to the new application role", moved, r.database)
			return nil
		})
		if err != nil {
			return fmt.Errorf("giving the objects in %s: %w", r.database, err)
		}
	}
	return d.With(ctx, time.Minute, func(ctx context.Context, c *pgx.Conn) error {
		if databaseExists {
			if _, err := c.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s OWNER TO %s", ident(r.database), ident(stagingAppRole))); err != nil {
				return err
			}
		}
		verifier, err := ScramVerifier(appPassword)
		if err != nil {
			return fmt.Errorf("the password of %s: %w", r.app, err)
		}
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		for _, stmt := range []string{
			fmt.Sprintf("ALTER ROLE %s RENAME TO %s", ident(r.app), ident(legacyBootstrapRole)),
			fmt.Sprintf("ALTER ROLE %s WITH NOLOGIN", ident(legacyBootstrapRole)),
			fmt.Sprintf("ALTER ROLE %s RENAME TO %s", ident(stagingAppRole), ident(r.app)),
			fmt.Sprintf("ALTER ROLE %s WITH %s PASSWORD %s", ident(r.app), appRoleAttributes, QuoteLiteral(verifier)),
		} {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		var ended int
		if err := c.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE usesysid = $1 AND pid <> pg_backend_pid()",
			bootstrapRoleOID).Scan(&ended); err != nil {
			return err
		}
		logf("the old bootstrap role is %s (NOLOGIN); %s is an ordinary role with the same password; ended the old role's %d sessions",
			legacyBootstrapRole, r.app, ended)
		return nil
	})
}

// withDatabase runs f on a new connection made with connString.
func withDatabase(ctx context.Context, connString string, f func(context.Context, *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(context.Background()) }()
	return f(ctx, c)
}

// userObjects selects, in a database, the objects of kind in schemas that
// are not the system's, that no extension owns, and that the bootstrap
// role owns. Sequences owned by a column (serial, identity) and the
// objects of a table (indexes, TOAST) go with their table.
const userObjects = `
	WITH user_schemas AS (
		SELECT oid FROM pg_namespace
		WHERE nspname NOT IN ('pg_catalog', 'information_schema') AND nspname NOT LIKE 'pg\_%'
	), members AS (
		SELECT classid, objid FROM pg_depend WHERE deptype = 'e'
	)
	SELECT 'SCHEMA' AS kind, quote_ident(n.nspname) AS name FROM pg_namespace n
	WHERE n.oid IN (SELECT oid FROM user_schemas) AND n.nspowner = 10
		AND (('pg_namespace'::regclass, n.oid) NOT IN (SELECT * FROM members))
	UNION ALL
	SELECT CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'S' THEN 'SEQUENCE'
		WHEN 'f' THEN 'FOREIGN TABLE' WHEN 'c' THEN 'TYPE' ELSE 'TABLE' END, c.oid::regclass::text
	FROM pg_class c
	WHERE c.relnamespace IN (SELECT oid FROM user_schemas) AND c.relowner = 10 AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S', 'c')
		AND (('pg_class'::regclass, c.oid) NOT IN (SELECT * FROM members))
		AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d
			WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
	UNION ALL
	SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE' ELSE 'FUNCTION' END, p.oid::regprocedure::text
	FROM pg_proc p
	WHERE p.pronamespace IN (SELECT oid FROM user_schemas) AND p.proowner = 10
		AND (('pg_proc'::regclass, p.oid) NOT IN (SELECT * FROM members))
	UNION ALL
	SELECT CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, t.oid::regtype::text
	FROM pg_type t
	WHERE t.typnamespace IN (SELECT oid FROM user_schemas) AND t.typowner = 10 AND t.typtype IN ('e', 'd', 'r')
		AND (('pg_type'::regclass, t.oid) NOT IN (SELECT * FROM members))
	UNION ALL
	SELECT 'LARGE OBJECT', l.oid::text FROM pg_largeobject_metadata l WHERE l.lomowner = 10`

// countBootstrapObjects counts userObjects.
const countBootstrapObjects = `SELECT count(*) FROM (` + userObjects + `) o`

// giveBootstrapObjects gives every one of userObjects, in one transaction,
// to the role whose name, a quoted literal, replaces $target.
const giveBootstrapObjects = `DO $dbkeeper$
DECLARE
	o record;
BEGIN
	FOR o IN ` + userObjects + ` LOOP
		EXECUTE format('ALTER %s %s OWNER TO %I', o.kind, o.name, $target);
	END LOOP;
END
$dbkeeper$`
