package console

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/msgplatform/platform/internal/kvutil"
	"github.com/msgplatform/platform/platform"
)

// EndedSession is a session that ended before its expiry: its user
// logged out, or was signed out because they no longer check out.
type EndedSession struct {
	// ID is the session's id (Session.ID); stores keep a hash of it.
	ID string `json:"-"`
	// Principal is the session's user (user@tenant), for the record.
	Principal string `json:"principal"`
	// Expires is when the session would have expired: the record is
	// needed until then.
	Expires time.Time `json:"expires"`
	// Ended is when it ended, Why why ("logout", or the reason the user
	// was signed out).
	Ended time.Time `json:"ended"`
	Why   string    `json:"why"`
}

// EndedSessions is the installation-wide record of ended sessions: every
// console of the installation records the sessions it ends there and
// consults it on every authenticated request, so a cookie copied before
// a logout is refused by every platformd, not only the one that served
// the logout.
type EndedSessions interface {
	// End records e; the session is refused from then on.
	End(ctx context.Context, e EndedSession) error
	// Ended reports whether session id was ended. An error means the
	// store cannot tell: the console then refuses the request (503) and
	// keeps the cookie (fail closed; the session may still be valid).
	Ended(ctx context.Context, id string) (bool, error)
}

// EndedSessionsBucket is the replicated KV bucket (platform admin
// account) of KVEndedSessions: one key per ended session, the hex
// SHA-256 of its id, kept for the session TTL.
const EndedSessionsBucket = "platform-console-ended"

// KVEndedSessions records ended sessions in the JetStream KV bucket
// EndedSessionsBucket, created on first use with the installation's
// replicas and a TTL of the session TTL: a record is kept at least until
// the session it ends would have expired (a session lives at most the TTL
// from its sign-in, its record the TTL from its end). Ended reads the
// bucket on every call (a direct get, answered by any replica), so a
// session recorded by one platformd is refused by every other one within
// the bucket's replication lag (milliseconds); a read that fails is an
// error (fail closed). A read per request rather than a cache fed by a
// KV watch: console traffic is a few requests a second per user, the read
// is one round trip to a local node, and there is no window in which a
// lagging or resyncing watcher accepts an ended session.
type KVEndedSessions struct {
	js       jetstream.JetStream
	replicas int
	ttl      time.Duration

	mu sync.Mutex
	kv jetstream.KeyValue
}

var _ EndedSessions = (*KVEndedSessions)(nil)

// NewKVEndedSessions records ended sessions in EndedSessionsBucket of js,
// with replicas (the installation's durability; < 1: 1) and ttl (the
// consoles' Config.SessionTTL; 0: DefaultSessionTTL). The bucket is
// opened or created on first use; a bucket with a shorter TTL (created by
// an older platformd) is raised to ttl, never lowered.
func NewKVEndedSessions(js jetstream.JetStream, replicas int, ttl time.Duration) *KVEndedSessions {
	if replicas < 1 {
		replicas = 1
	}
	if ttl <= 0 {
		ttl = DefaultSessionTTL
	}
	return &KVEndedSessions{js: js, replicas: replicas, ttl: ttl}
}

// endedKey is the bucket key of session id: a hash, so the bucket's
// readers do not learn live session ids.
func endedKey(id string) string {
	h := sha256.Sum256([]byte("platform console session\x00" + id))
	return hex.EncodeToString(h[:])
}

// End records e (a Put: ending a session twice is no error).
func (k *KVEndedSessions) End(ctx context.Context, e EndedSession) error {
	if e.ID == "" {
		return errors.New("console: end session: no session id")
	}
	kv, err := k.bucket(ctx)
	if err != nil {
		return err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	if _, err := kv.Put(ctx, endedKey(e.ID), b); err != nil {
		return fmt.Errorf("console: record the end of session %s in %s: %w", e.Principal, EndedSessionsBucket, err)
	}
	return nil
}

// Ended reports whether session id was recorded as ended.
func (k *KVEndedSessions) Ended(ctx context.Context, id string) (bool, error) {
	kv, err := k.bucket(ctx)
	if err != nil {
		return false, err
	}
	_, err = kv.Get(ctx, endedKey(id))
	// A bucket just created, or one electing a new leader, answers a
	// moment later: "no responders" then is not an answer yet.
	for try := 0; (errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse)) && try < 20 && ctx.Err() == nil; try++ {
		time.Sleep(50 * time.Millisecond)
		_, err = kv.Get(ctx, endedKey(id))
	}
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	}
	return false, fmt.Errorf("console: read %s: %w", EndedSessionsBucket, err)
}

// bucket opens or creates EndedSessionsBucket, once.
func (k *KVEndedSessions) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kv != nil {
		return k.kv, nil
	}
	kv, err := kvutil.OpenKeep(ctx, k.js, jetstream.KeyValueConfig{
		Bucket: EndedSessionsBucket, Description: "web console sessions ended before their expiry (logout, user signed out), refused by every platformd",
		TTL: k.ttl, History: 1, Replicas: k.replicas, Storage: jetstream.FileStorage,
	})
	if err == nil {
		err = k.raiseTTL(ctx, kv)
	}
	if err == nil {
		// A revocation list: a session ended through one platformd must be
		// refused by the next request to any other, so reads are the
		// stream leader's, never a replica's that has not caught up.
		kv, err = platform.LeaderReads(ctx, k.js, kv)
	}
	if err != nil {
		return nil, fmt.Errorf("console: ended-sessions bucket %s: %w", EndedSessionsBucket, err)
	}
	k.kv = kv
	return kv, nil
}

// raiseTTL raises the bucket's TTL to k.ttl when it is shorter (a record
// must outlive the session it ends).
func (k *KVEndedSessions) raiseTTL(ctx context.Context, kv jetstream.KeyValue) error {
	st, err := kv.Status(ctx)
	if err != nil {
		return err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || bs.TTL() == 0 || bs.TTL() >= k.ttl {
		return nil
	}
	cfg := bs.Config()
	cfg.TTL = k.ttl
	_, err = k.js.UpdateKeyValue(ctx, cfg)
	return err
}

// endedTimeout bounds one call to Config.Ended.
const endedTimeout = 5 * time.Second

// endSession ends s: at once on this console (its cookie is cleared and
// its id remembered until it expires), and installation-wide in
// Config.Ended. A record that cannot be written now is retried in the
// background (every second, then backing off to 30s) until it is
// written, the session expires, Config.Ended's connection is closed or
// the console is closed; meanwhile the other platformds accept a copy
// of the cookie, and the failure is logged as an error.
func (c *Console) endSession(w http.ResponseWriter, r *http.Request, s Session, why string) {
	c.ss.forget(w, r, s)
	if c.cfg.Ended == nil {
		return
	}
	e := EndedSession{ID: s.ID, Principal: s.Principal(), Expires: time.Unix(s.Expires, 0).UTC(), Ended: time.Now().UTC(), Why: why}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), endedTimeout)
	err := c.cfg.Ended.End(ctx, e)
	cancel()
	if err == nil {
		return
	}
	c.log.Error("console: session ended here but not recorded for the other platformds; retrying", "principal", e.Principal, "why", why, "err", err)
	c.retries.Add(1)
	go c.retryEnd(e)
}

// retryEnd writes e to Config.Ended until it is written or no longer
// needed (see endSession).
func (c *Console) retryEnd(e EndedSession) {
	defer c.retries.Done()
	wait := time.Second
	for {
		t := time.NewTimer(min(wait, time.Until(e.Expires)))
		select {
		case <-c.done:
			t.Stop()
			return
		case <-t.C:
		}
		if !time.Now().Before(e.Expires) {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), endedTimeout)
		err := c.cfg.Ended.End(ctx, e)
		cancel()
		switch {
		case err == nil:
			c.log.Info("console: ended session recorded for the other platformds", "principal", e.Principal, "why", e.Why)
			return
		case errors.Is(err, nats.ErrConnectionClosed):
			c.log.Error("console: ended session not recorded for the other platformds: connection closed", "principal", e.Principal, "expires", e.Expires)
			return
		}
		wait = min(2*wait, 30*time.Second)
	}
}
