package region

import "strings"

// The JetStream API surface of one stream, as the region link must deny it
// for resident data. jsStreamAPI is one row per subject template of
// nats-server v2.15.2 (server/jetstream_api.go) that names a stream, with
// the argument that carries the stream's name and what the request can do
// with the stream. TestStreamAPIClassifiesEveryServerSubject parses the
// server's source and fails when a subject template that names a stream
// (or any template at all) is missing here or differs, so a server upgrade
// that adds an API is classified before it can cross a link.
//
// Every class but apiMetadata is denied on the link for a resident stream:
// what reads messages (message get, direct get, consumers and their pulls,
// acks and flow control, snapshots), what changes the stream or its
// consumers (create, update with a republish or a source, purge, delete,
// restore, consumer reset), and what moves them. apiMetadata crosses: it
// returns a stream's configuration and state, never a message, and the
// residency checks of the gate and guard read a source's configuration
// through the link (GuardOptions.ThroughLink). STREAM.INFO with a subjects
// filter lists the stream's subjects; that is why keys must not carry
// secrets (see the README's residency section).

// apiClass is what a JetStream API request can do with the stream it names.
type apiClass string

const (
	apiRead     apiClass = "read"     // returns or delivers stored messages
	apiConsumer apiClass = "consumer" // acks and flow control of a consumer's deliveries
	apiWrite    apiClass = "write"    // changes the stream or its messages
	apiAdmin    apiClass = "admin"    // changes consumers, leaders, placement
	apiMetadata apiClass = "metadata" // configuration and state only: crosses the link
	apiSystem   apiClass = "system"   // system account only: not on the platform account's link
	apiNoStream apiClass = "none"     // names no stream
)

// streamAPI is one subject template of the JetStream API.
type streamAPI struct {
	// Const is the constant's name in nats-server's jetstream_api.go.
	Const string
	// Template is its value (a fmt template with %s arguments).
	Template string
	// Stream is the index of the %s argument naming the stream (-1: none).
	Stream int
	Class  apiClass
}

// jsStreamAPI: every subject template of nats-server v2.15.2's
// jetstream_api.go (see the file comment).
var jsStreamAPI = []streamAPI{
	{"JSApiStreamCreateT", "$JS.API.STREAM.CREATE.%s", 0, apiWrite},
	{"JSApiStreamUpdateT", "$JS.API.STREAM.UPDATE.%s", 0, apiWrite},
	{"JSApiStreamInfoT", "$JS.API.STREAM.INFO.%s", 0, apiMetadata},
	{"JSApiStreamDeleteT", "$JS.API.STREAM.DELETE.%s", 0, apiWrite},
	{"JSApiStreamPurgeT", "$JS.API.STREAM.PURGE.%s", 0, apiWrite},
	{"JSApiStreamSnapshotT", "$JS.API.STREAM.SNAPSHOT.%s", 0, apiRead},
	{"JSApiStreamRestoreT", "$JS.API.STREAM.RESTORE.%s", 0, apiWrite},
	{"JSApiMsgDeleteT", "$JS.API.STREAM.MSG.DELETE.%s", 0, apiWrite},
	{"JSApiMsgGetT", "$JS.API.STREAM.MSG.GET.%s", 0, apiRead},
	{"JSDirectMsgGetT", "$JS.API.DIRECT.GET.%s", 0, apiRead},
	{"JSDirectGetLastBySubjectT", "$JS.API.DIRECT.GET.%s.%s", 0, apiRead},
	{"JSApiConsumerCreateT", "$JS.API.CONSUMER.CREATE.%s", 0, apiRead},
	{"JSApiConsumerCreateExT", "$JS.API.CONSUMER.CREATE.%s.%s.%s", 0, apiRead},
	{"JSApiDurableCreateT", "$JS.API.CONSUMER.DURABLE.CREATE.%s.%s", 0, apiRead},
	{"JSApiConsumersT", "$JS.API.CONSUMER.NAMES.%s", 0, apiMetadata},
	{"JSApiConsumerListT", "$JS.API.CONSUMER.LIST.%s", 0, apiMetadata},
	{"JSApiConsumerInfoT", "$JS.API.CONSUMER.INFO.%s.%s", 0, apiMetadata},
	{"JSApiConsumerDeleteT", "$JS.API.CONSUMER.DELETE.%s.%s", 0, apiAdmin},
	{"JSApiConsumerPauseT", "$JS.API.CONSUMER.PAUSE.%s.%s", 0, apiAdmin},
	{"JSApiRequestNextT", "$JS.API.CONSUMER.MSG.NEXT.%s.%s", 0, apiRead},
	{"JSApiConsumerResetT", "$JS.API.CONSUMER.RESET.%s.%s", 0, apiAdmin},
	{"JSApiConsumerUnpinT", "$JS.API.CONSUMER.UNPIN.%s.%s", 0, apiAdmin},
	{"jsSnapshotAckT", "$JS.SNAPSHOT.ACK.%s.%s", 0, apiRead},
	{"jsRestoreDeliverT", "$JS.SNAPSHOT.RESTORE.%s.%s", 0, apiWrite},
	{"JSApiStreamRemovePeerT", "$JS.API.STREAM.PEER.REMOVE.%s", 0, apiAdmin},
	{"JSApiStreamEvacuatePeerT", "$JS.API.STREAM.PEER.EVACUATE.%s", 0, apiAdmin},
	{"JSApiStreamCancelMoveT", "$JS.API.STREAM.CANCEL_MOVE.%s", 0, apiAdmin},
	{"JSApiStreamLeaderStepDownT", "$JS.API.STREAM.LEADER.STEPDOWN.%s", 0, apiAdmin},
	{"JSApiConsumerLeaderStepDownT", "$JS.API.CONSUMER.LEADER.STEPDOWN.%s.%s", 0, apiAdmin},
	{"JSApiConsumerRemovePeerT", "$JS.API.CONSUMER.PEER.REMOVE.%s.%s", 0, apiAdmin},
	{"JSApiConsumerEvacuatePeerT", "$JS.API.CONSUMER.PEER.EVACUATE.%s.%s", 0, apiAdmin},
	{"JSApiAccountPurgeT", "$JS.API.ACCOUNT.PURGE.%s", -1, apiSystem},
	{"JSApiServerStreamMoveT", "$JS.API.ACCOUNT.STREAM.MOVE.%s.%s", 1, apiSystem},
	{"JSApiServerStreamCancelMoveT", "$JS.API.ACCOUNT.STREAM.CANCEL_MOVE.%s.%s", 1, apiSystem},
	{"jsAckT", "$JS.ACK.%s.%s", 0, apiConsumer},
	{"jsAckTv2", "$JS.ACK.%s.%s.%s.%s", 2, apiConsumer},
	{"jsFlowControl", "$JS.FC.%s.%s.*", 0, apiConsumer},
	{"jsFlowControlV2", "$JS.FC.%s.%s.%s.%s.*", 2, apiConsumer},
	{"jsAllAPI", "$JS.API.>", -1, apiNoStream},
	{"jsDomainAPI", "$JS.%s.API.>", -1, apiNoStream},
}

// denied reports whether the link denies a for a resident stream.
func (a streamAPI) denied() bool {
	return a.Stream >= 0 && a.Class != apiMetadata && a.Class != apiSystem && a.Class != apiNoStream
}

// subjects returns the subjects of a that name stream: the arguments
// before the stream's are any token, everything after it any tail; a
// $JS.API. template also in its domain form ($JS.<domain>.API., what
// nats --js-domain and cross-domain mirrors send through the link).
func (a streamAPI) subjects(stream string) []string {
	toks := strings.Split(a.Template, ".")
	arg := 0
	var out []string
	for i, tok := range toks {
		if tok != "%s" {
			out = append(out, tok)
			continue
		}
		if arg == a.Stream {
			out = append(out, stream)
			if i < len(toks)-1 {
				out = append(out, ">")
			}
			break
		}
		out = append(out, "*")
		arg++
	}
	s := strings.Join(out, ".")
	if rest, ok := strings.CutPrefix(s, "$JS.API."); ok {
		return []string{s, "$JS.*.API." + rest}
	}
	return []string{s}
}

// StreamDeny returns the subjects a region link denies for a stream holding
// resident data: every JetStream API request and consumer subject that
// names the stream, except those that return only its configuration and
// state (see jsStreamAPI).
func StreamDeny(stream string) []string {
	var out []string
	for _, a := range jsStreamAPI {
		if a.denied() {
			out = append(out, a.subjects(stream)...)
		}
	}
	return out
}
