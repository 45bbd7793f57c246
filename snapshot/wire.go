package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// The wire form of a node snapshot in etcd: the JSON of Encode, compressed with zstd
// against the node's base. A base is a full snapshot of the same node, which its sidecar
// writes under BaseKey now and then (at start, after a lost lease, every minute or so);
// each node key value is a zstd frame whose dictionary is that base's JSON, so it carries
// little more than what changed since (docs/scale.md: 10.9 KB of JSON, 1.2 KB compressed
// alone, about 0.65 KB against a base). The frame's dictionary id names the base (BaseID):
// a reader that holds another base knows it cannot decode the value, rather than misread it.
//
// Every value starts either with '{' (the plain JSON that sidecars before the wire form
// wrote, still read) or with zstd's magic number; base values are frames without a
// dictionary. The JSON inside carries its SchemaVersion as before: the wire form changes
// how a snapshot travels, not what it says, so the types stay the contract and a field
// added to them needs nothing here.

// MaxWireJSON bounds what one value may decompress to: an encoded snapshot is at most
// MaxNodeBytes, and a value that claims more is refused before it is inflated.
const MaxWireJSON = 2 * MaxNodeBytes

// zstdMagic starts every zstd frame.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// ErrNoBase says that a value was compressed against a base the reader does not hold.
var ErrNoBase = errors.New("snapshot value needs a base this reader does not hold")

// Base is a node's full snapshot that its later values are compressed against.
type Base struct {
	id   uint32
	json []byte
}

// NewBase makes a base of a snapshot's JSON (Encode's output). It keeps json: do not
// change it afterwards.
func NewBase(json []byte) *Base { return &Base{id: BaseID(json), json: json} }

// ID is the base's dictionary id.
func (b *Base) ID() uint32 { return b.id }

// JSON is the base's snapshot as Encode wrote it.
func (b *Base) JSON() []byte { return b.json }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// BaseID is the dictionary id of a base: a checksum of its JSON, never 0 (which zstd
// reserves for "no dictionary").
func BaseID(json []byte) uint32 {
	id := crc32.Checksum(json, castagnoli)
	if id == 0 {
		id = 1
	}
	return id
}

// Wire compresses and decompresses node snapshots; its zero value is ready. It is safe for
// concurrent use: it keeps a few zstd coders (as many as GOMAXPROCS of each kind; callers
// beyond wait), each remembering the base it was last set to, so that a sidecar (one base a
// minute) never rebuilds its tables, and a load generator of thousands of nodes holds a
// few coders, not one per node. (Not a sync.Pool: a coder costs a megabyte of tables, and
// a pool emptied at every garbage collection would build them again and again.)
type Wire struct {
	once     sync.Once
	encoders chan *wireEncoder
	decoders chan *wireDecoder
	// A token per coder made, up to the bound.
	madeEnc, madeDec chan struct{}
}

func (w *Wire) init() {
	w.once.Do(func() {
		n := runtime.GOMAXPROCS(0)
		w.encoders = make(chan *wireEncoder, n)
		w.decoders = make(chan *wireDecoder, n)
		w.madeEnc, w.madeDec = make(chan struct{}, n), make(chan struct{}, n)
	})
}

type wireEncoder struct {
	enc  *zstd.Encoder
	base *Base // the dictionary enc is set to (nil: none)
}

type wireDecoder struct {
	dec  *zstd.Decoder
	base *Base
}

// take returns an idle coder, a new one while fewer than the bound exist (a token in
// made), or waits for one to come back.
func take[C any](idle chan C, made chan struct{}, build func() (C, error)) (C, error) {
	select {
	case c := <-idle:
		return c, nil
	default:
	}
	select {
	case c := <-idle:
		return c, nil
	case made <- struct{}{}:
		c, err := build()
		if err != nil {
			<-made
		}
		return c, err
	}
}

func (w *Wire) getEncoder() (*wireEncoder, error) {
	w.init()
	return take(w.encoders, w.madeEnc, func() (*wireEncoder, error) {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(encoderLevel),
			zstd.WithWindowSize(MaxWireJSON), zstd.WithLowerEncoderMem(true))
		if err != nil {
			return nil, fmt.Errorf("snapshot: zstd encoder: %w", err)
		}
		return &wireEncoder{enc: enc}, nil
	})
}

func (w *Wire) getDecoder() (*wireDecoder, error) {
	w.init()
	return take(w.decoders, w.madeDec, func() (*wireDecoder, error) {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxWireJSON),
			zstd.WithDecoderMaxWindow(MaxWireJSON), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, fmt.Errorf("snapshot: zstd decoder: %w", err)
		}
		return &wireDecoder{dec: dec}, nil
	})
}

// encoderLevel: SpeedDefault compresses a node's value only about 3% better (docs/scale.md),
// but a coder that switches base rebuilds its tables at every call, which costs 1.9 ms
// there and 80 µs here (BenchmarkWireDelta): a load generator of thousands of nodes
// switches at every call.
const encoderLevel = zstd.SpeedFastest

// Full compresses a snapshot's JSON without a base: the value of a base key.
func (w *Wire) Full(json []byte) ([]byte, error) { return w.compress(json, nil) }

// Delta compresses a snapshot's JSON against base: the value of a node key.
func (w *Wire) Delta(json []byte, base *Base) ([]byte, error) {
	if base == nil {
		return nil, errors.New("snapshot: delta without a base")
	}
	return w.compress(json, base)
}

func (w *Wire) compress(json []byte, base *Base) ([]byte, error) {
	if len(json) > MaxWireJSON {
		return nil, fmt.Errorf("snapshot of %d bytes is over the wire limit %d", len(json), MaxWireJSON)
	}
	e, err := w.getEncoder()
	if err != nil {
		return nil, err
	}
	defer func() { w.encoders <- e }()
	if e.base != base {
		opt := zstd.WithEncoderDictDelete()
		if base != nil {
			opt = zstd.WithEncoderDictRaw(base.id, base.json)
		}
		if err := e.enc.ResetWithOptions(nil, opt); err != nil {
			return nil, fmt.Errorf("snapshot: zstd dictionary: %w", err)
		}
		e.base = base
	}
	return e.enc.EncodeAll(json, make([]byte, 0, len(json)/4+64)), nil
}

// NeedsBase says which base a value was compressed against: 0 for a plain JSON value or a
// frame without one (a base key's value).
func NeedsBase(value []byte) (uint32, error) {
	if !bytes.HasPrefix(value, zstdMagic) {
		return 0, nil
	}
	var h zstd.Header
	if err := h.Decode(value); err != nil {
		return 0, fmt.Errorf("snapshot value: %w", err)
	}
	return h.DictionaryID, nil
}

// JSON returns a value's snapshot JSON: plain JSON as it is, a frame decompressed with
// base when it names one (ErrNoBase when base is nil or another). It never inflates more
// than MaxWireJSON bytes.
func (w *Wire) JSON(value []byte, base *Base) ([]byte, error) {
	if len(value) > 0 && value[0] == '{' {
		return value, nil
	}
	id, err := NeedsBase(value)
	if err != nil {
		return nil, err
	}
	if !bytes.HasPrefix(value, zstdMagic) {
		return nil, errors.New("snapshot value is neither JSON nor zstd")
	}
	if id != 0 && (base == nil || base.id != id) {
		return nil, fmt.Errorf("%w (base %08x)", ErrNoBase, id)
	}
	if id == 0 {
		base = nil
	}
	d, err := w.getDecoder()
	if err != nil {
		return nil, err
	}
	defer func() { w.decoders <- d }()
	if d.base != base {
		opts := []zstd.DOption{zstd.WithDecoderDictDelete()}
		if base != nil {
			opts = append(opts, zstd.WithDecoderDictRaw(base.id, base.json))
		}
		if err := d.dec.ResetWithOptions(nil, opts...); err != nil {
			return nil, fmt.Errorf("snapshot: zstd dictionary: %w", err)
		}
		d.base = base
	}
	out, err := d.dec.DecodeAll(value, nil)
	if err != nil {
		return nil, fmt.Errorf("decompress snapshot value: %w", err)
	}
	return out, nil
}

// Decode reads a node key's value into a snapshot, decompressing it with base where it
// was compressed against one (see JSON).
func (w *Wire) Decode(value []byte, base *Base) (*Node, error) {
	b, err := w.JSON(value, base)
	if err != nil {
		return nil, err
	}
	return Decode(b)
}

// DecodeBase reads a base key's value.
func (w *Wire) DecodeBase(value []byte) (*Base, error) {
	id, err := NeedsBase(value)
	if err != nil {
		return nil, err
	}
	if id != 0 {
		return nil, errors.New("snapshot base value is compressed against another base")
	}
	b, err := w.JSON(value, nil)
	if err != nil {
		return nil, err
	}
	return NewBase(b), nil
}
