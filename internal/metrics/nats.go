package metrics

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"
)

// Source lists the running local servers and their region at scrape time.
type Source func() []Server

// Server is one local nats-server and the region it belongs to.
type Server struct {
	Srv    *server.Server
	Region string
}

// NATSCollector reads Varz and Jsz from each local server on every scrape.
type NATSCollector struct {
	src Source
}

var _ prometheus.Collector = (*NATSCollector)(nil)

// NewNATSCollector returns a collector over src.
func NewNATSCollector(src Source) *NATSCollector { return &NATSCollector{src: src} }

var (
	srvLabels    = []string{"server", "region"}
	streamLabels = []string{"server", "region", "account", "stream"}
	consLabels   = []string{"server", "region", "account", "stream", "consumer"}

	dUp            = prometheus.NewDesc("platform_nats_server_up", "1 when the local nats-server is running.", srvLabels, nil)
	dConns         = prometheus.NewDesc("platform_nats_connections", "Client connections open on the server.", srvLabels, nil)
	dRoutes        = prometheus.NewDesc("platform_nats_routes", "Route connections to peers in the cluster.", srvLabels, nil)
	dInMsgs        = prometheus.NewDesc("platform_nats_in_msgs_total", "Messages received by the server.", srvLabels, nil)
	dOutMsgs       = prometheus.NewDesc("platform_nats_out_msgs_total", "Messages sent by the server.", srvLabels, nil)
	dInBytes       = prometheus.NewDesc("platform_nats_in_bytes_total", "Bytes received by the server.", srvLabels, nil)
	dOutBytes      = prometheus.NewDesc("platform_nats_out_bytes_total", "Bytes sent by the server.", srvLabels, nil)
	dSlow          = prometheus.NewDesc("platform_nats_slow_consumers_total", "Clients disconnected for being slow consumers.", srvLabels, nil)
	dMem           = prometheus.NewDesc("platform_nats_mem_bytes", "Resident memory of the process hosting the server.", srvLabels, nil)
	dJSMem         = prometheus.NewDesc("platform_jetstream_memory_bytes", "JetStream memory storage in use.", srvLabels, nil)
	dJSStore       = prometheus.NewDesc("platform_jetstream_storage_bytes", "JetStream file storage in use.", srvLabels, nil)
	dJSMemMax      = prometheus.NewDesc("platform_jetstream_memory_max_bytes", "JetStream memory storage limit.", srvLabels, nil)
	dJSStoreMax    = prometheus.NewDesc("platform_jetstream_storage_max_bytes", "JetStream file storage limit.", srvLabels, nil)
	dJSStreams     = prometheus.NewDesc("platform_jetstream_streams", "Stream replicas hosted by the server.", srvLabels, nil)
	dJSConsumers   = prometheus.NewDesc("platform_jetstream_consumers", "Consumer replicas hosted by the server.", srvLabels, nil)
	dJSAPI         = prometheus.NewDesc("platform_jetstream_api_requests_total", "JetStream API requests served.", srvLabels, nil)
	dJSAPIErrors   = prometheus.NewDesc("platform_jetstream_api_errors_total", "JetStream API requests that failed.", srvLabels, nil)
	dMetaLeader    = prometheus.NewDesc("platform_jetstream_meta_leader", "1 when this server is the JetStream meta leader.", srvLabels, nil)
	dMetaHasLeader = prometheus.NewDesc("platform_jetstream_meta_has_leader", "1 when this server sees a JetStream meta leader (0: the region cannot create or change streams).", srvLabels, nil)
	dMetaSize      = prometheus.NewDesc("platform_jetstream_meta_cluster_size", "Known size of the JetStream meta group.", srvLabels, nil)
	dMetaOffline   = prometheus.NewDesc("platform_jetstream_meta_peers_offline", "Meta group peers not seen recently.", srvLabels, nil)

	dStreamMsgs     = prometheus.NewDesc("platform_stream_messages", "Messages in the stream (reported by its leader).", streamLabels, nil)
	dStreamBytes    = prometheus.NewDesc("platform_stream_bytes", "Bytes in the stream (reported by its leader).", streamLabels, nil)
	dStreamFirstSeq = prometheus.NewDesc("platform_stream_first_seq", "First sequence in the stream.", streamLabels, nil)
	dStreamLastSeq  = prometheus.NewDesc("platform_stream_last_seq", "Last sequence in the stream.", streamLabels, nil)
	dStreamReplicas = prometheus.NewDesc("platform_stream_replicas", "Configured replicas of the stream.", streamLabels, nil)
	dStreamCurrent  = prometheus.NewDesc("platform_stream_replicas_current", "Replicas current with the leader, the leader included.", streamLabels, nil)
	dStreamLagging  = prometheus.NewDesc("platform_stream_replicas_lagging", "Replicas not current with the leader (under-replicated when > 0).", streamLabels, nil)
	dStreamHasLdr   = prometheus.NewDesc("platform_stream_has_leader", "1 when the stream has a leader (reported by the leader); 0 reported by every server hosting a replica of a stream with none (quorum lost: publishes are refused).", streamLabels, nil)
	dConsPending    = prometheus.NewDesc("platform_consumer_pending_messages", "Messages not yet delivered to the consumer.", consLabels, nil)
	dConsAckPending = prometheus.NewDesc("platform_consumer_ack_pending_messages", "Messages delivered and not yet acknowledged.", consLabels, nil)
	dConsRedeliv    = prometheus.NewDesc("platform_consumer_redelivered_messages", "Messages redelivered and not yet acknowledged.", consLabels, nil)
)

// Describe implements prometheus.Collector.
func (c *NATSCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dUp, dConns, dRoutes, dInMsgs, dOutMsgs, dInBytes, dOutBytes, dSlow, dMem,
		dJSMem, dJSStore, dJSMemMax, dJSStoreMax, dJSStreams, dJSConsumers, dJSAPI, dJSAPIErrors,
		dMetaLeader, dMetaHasLeader, dMetaSize, dMetaOffline,
		dStreamMsgs, dStreamBytes, dStreamFirstSeq, dStreamLastSeq, dStreamReplicas, dStreamCurrent, dStreamLagging, dStreamHasLdr,
		dConsPending, dConsAckPending, dConsRedeliv} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *NATSCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.src() {
		c.collectServer(ch, s)
	}
}

func (c *NATSCollector) collectServer(ch chan<- prometheus.Metric, s Server) {
	if s.Srv == nil || !s.Srv.Running() {
		return
	}
	name := s.Srv.Name()
	lv := []string{name, s.Region}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge(dUp, 1, lv...)
	if vz, err := s.Srv.Varz(nil); err == nil {
		gauge(dConns, float64(vz.Connections), lv...)
		gauge(dRoutes, float64(vz.Routes), lv...)
		counter(dInMsgs, float64(vz.InMsgs), lv...)
		counter(dOutMsgs, float64(vz.OutMsgs), lv...)
		counter(dInBytes, float64(vz.InBytes), lv...)
		counter(dOutBytes, float64(vz.OutBytes), lv...)
		counter(dSlow, float64(vz.SlowConsumers), lv...)
		gauge(dMem, float64(vz.Mem), lv...)
	}
	// Every hosted stream, not only the led ones: a stream that lost its
	// leader is led by nobody, and only its replicas can report it.
	jsz, err := s.Srv.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true})
	if err != nil || jsz.Disabled {
		return
	}
	gauge(dJSMem, float64(jsz.Memory), lv...)
	gauge(dJSStore, float64(jsz.Store), lv...)
	gauge(dJSMemMax, float64(jsz.Config.MaxMemory), lv...)
	gauge(dJSStoreMax, float64(jsz.Config.MaxStore), lv...)
	gauge(dJSStreams, float64(jsz.Streams), lv...)
	gauge(dJSConsumers, float64(jsz.Consumers), lv...)
	counter(dJSAPI, float64(jsz.API.Total), lv...)
	counter(dJSAPIErrors, float64(jsz.API.Errors), lv...)
	if m := jsz.Meta; m != nil {
		gauge(dMetaLeader, b2f(m.Leader == name), lv...)
		gauge(dMetaHasLeader, b2f(m.Leader != ""), lv...)
		gauge(dMetaSize, float64(m.Size), lv...)
		offline := 0
		for _, r := range m.Replicas {
			if r.Offline {
				offline++
			}
		}
		gauge(dMetaOffline, float64(offline), lv...)
	} else {
		// Standalone: JetStream needs no meta group.
		gauge(dMetaLeader, 1, lv...)
		gauge(dMetaHasLeader, 1, lv...)
		gauge(dMetaSize, 1, lv...)
		gauge(dMetaOffline, 0, lv...)
	}
	for _, acc := range jsz.AccountDetails {
		for _, st := range acc.Streams {
			sl := []string{name, s.Region, accountLabel(acc), st.Name}
			if st.Cluster != nil && st.Cluster.Leader == "" {
				gauge(dStreamHasLdr, 0, sl...) // every replica says so
				continue
			}
			if st.Cluster != nil && st.Cluster.Leader != name {
				continue // followers leave the stream's series to its leader
			}
			gauge(dStreamHasLdr, 1, sl...)
			gauge(dStreamMsgs, float64(st.State.Msgs), sl...)
			gauge(dStreamBytes, float64(st.State.Bytes), sl...)
			gauge(dStreamFirstSeq, float64(st.State.FirstSeq), sl...)
			gauge(dStreamLastSeq, float64(st.State.LastSeq), sl...)
			replicas, current := 1, 1
			if st.Config != nil && st.Config.Replicas > 0 {
				replicas = st.Config.Replicas
			} else if st.Cluster != nil {
				// Jsz leaves the config out unless asked: the leader
				// lists every other peer, offline ones included.
				replicas = 1 + len(st.Cluster.Replicas)
			}
			if st.Cluster != nil {
				for _, r := range st.Cluster.Replicas {
					if r.Current {
						current++
					}
				}
			}
			gauge(dStreamReplicas, float64(replicas), sl...)
			gauge(dStreamCurrent, float64(current), sl...)
			gauge(dStreamLagging, float64(max(replicas-current, 0)), sl...)
			for _, ci := range st.Consumer {
				if ci == nil {
					continue
				}
				cl := append(append([]string(nil), sl...), ci.Name)
				gauge(dConsPending, float64(ci.NumPending), cl...)
				gauge(dConsAckPending, float64(ci.NumAckPending), cl...)
				gauge(dConsRedeliv, float64(ci.NumRedelivered), cl...)
			}
		}
	}
}

func accountLabel(a *server.AccountDetail) string {
	if a.Name != "" {
		return a.Name
	}
	return a.Id
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
