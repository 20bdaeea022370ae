package strom.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.time.LocalDate;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF1;

/**
 * strom's from_avro in the JVM: Confluent-framed Avro (magic byte 0, 4-byte schema id, body) to a
 * Row of the reader schema's struct type, for Spark's Java UDF API.
 *
 * <p>The driver (strom.spark.avro) passes the reader schema and the writer schemas it knows (the
 * subject's versions), each a self-contained JSON text; an id it did not pass (a version registered
 * after the query was planned) is fetched once per executor JVM from the registry, its references
 * followed. Each record is decoded by Avro's GenericDatumReader(writer, reader): Avro's own
 * resolution rules bring it to the reader's shape. No Python process takes part.
 */
public final class AvroDecode implements UDF1<byte[], Row> {
  private static final long serialVersionUID = 1L;
  private static final int HEADER = 5;
  // Writer schemas fetched from a registry, per executor JVM: an id's schema never changes.
  private static final Map<String, Schema> FETCHED = new ConcurrentHashMap<>();

  private final int readerId;
  private final String readerText;
  private final HashMap<Integer, String> writerTexts;
  private final String[] registryUrls;
  private final String authorization; // an HTTP Authorization header, or null
  private final boolean permissive;

  // Built on first use in each task's own copy of this object (Spark deserializes one per task).
  private transient Schema reader;
  private transient Map<Integer, GenericDatumReader<Object>> readers;
  private transient Map<Integer, RuntimeException> failures;
  private transient Conv toRow;
  private transient BinaryDecoder decoder;
  private transient int lastId;
  private transient GenericDatumReader<Object> last;
  private transient Object reuse;

  public AvroDecode(int readerId, String readerText, Map<Integer, String> writerTexts, String registryUrls,
      String authorization, boolean permissive) {
    this.readerId = readerId;
    this.readerText = readerText;
    this.writerTexts = new HashMap<>(writerTexts);
    this.registryUrls = registryUrls.split(",");
    this.authorization = authorization == null || authorization.isEmpty() ? null : authorization;
    this.permissive = permissive;
  }

  /** The Python side's error names: a value that is not framed Avro of a schema the registry has. */
  public static final class AvroDecodeException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    AvroDecodeException(String message, Throwable cause) {
      super(message, cause);
    }
  }

  @Override
  public Row call(byte[] value) {
    if (value == null) {
      return null;
    }
    if (reader == null) {
      reader = new Schema.Parser().parse(readerText);
      readers = new HashMap<>();
      failures = new HashMap<>();
      toRow = conv(reader);
      lastId = -1;
    }
    if (value.length < HEADER || value[0] != 0) {
      if (permissive) {
        return null;
      }
      throw new AvroDecodeException(
          "a value is not Confluent-framed Avro (magic byte 0, 4-byte schema id, body)", null);
    }
    int id = ((value[1] & 0xff) << 24) | ((value[2] & 0xff) << 16) | ((value[3] & 0xff) << 8) | (value[4] & 0xff);
    GenericDatumReader<Object> datumReader;
    try {
      datumReader = id == lastId ? last : readerFor(id);
    } catch (RuntimeException e) {
      if (permissive) {
        return null;
      }
      throw new AvroDecodeException("schema id " + id + " could not be read: " + e.getMessage(), e);
    }
    lastId = id;
    last = datumReader;
    try {
      decoder = DecoderFactory.get().binaryDecoder(value, HEADER, value.length - HEADER, decoder);
      reuse = datumReader.read(reuse, decoder);
      return (Row) toRow.apply(reuse);
    } catch (IOException | RuntimeException e) {
      reuse = null;
      if (permissive) {
        return null;
      }
      throw new AvroDecodeException("a value written with schema id " + id + " does not decode: " + e, e);
    }
  }

  private GenericDatumReader<Object> readerFor(int id) {
    GenericDatumReader<Object> r = readers.get(id);
    if (r == null) {
      RuntimeException failed = failures.get(id);
      if (failed != null) {
        throw failed; // asked once per task: a PERMISSIVE read of many such values makes one request
      }
      try {
        Schema writer;
        if (id == readerId) {
          writer = reader;
        } else if (writerTexts.containsKey(id)) {
          writer = new Schema.Parser().parse(writerTexts.get(id));
        } else {
          writer = FETCHED.computeIfAbsent(String.join(",", registryUrls) + "#" + id, k -> fetch(id));
        }
        r = new GenericDatumReader<>(writer, reader);
      } catch (RuntimeException e) {
        failures.put(id, e);
        throw e;
      }
      readers.put(id, r);
    }
    return r;
  }

  // ------------------------------------------------------------------------------------------------
  // The registry (Confluent's REST API): GET /schemas/ids/{id}, its references by subject and version

  private Schema fetch(int id) {
    JsonNode schema = get("/schemas/ids/" + id);
    String type = schema.path("schemaType").asText("AVRO");
    if (!type.equals("AVRO")) {
      throw new IllegalArgumentException("schema id " + id + " is a " + type + " schema, not Avro");
    }
    Schema.Parser parser = new Schema.Parser();
    references(schema, parser, new HashSet<>());
    return parser.parse(schema.get("schema").asText());
  }

  /** Parse every schema the given one references (depth first) into the parser: their named types
   * are then known when the referencing schema is parsed. */
  private void references(JsonNode schema, Schema.Parser parser, Set<String> seen) {
    for (JsonNode ref : schema.path("references")) {
      String subject = ref.get("subject").asText();
      String version = ref.get("version").asText();
      if (seen.add(subject + "/" + version)) {
        JsonNode referenced = get("/subjects/" + URLEncoder.encode(subject, StandardCharsets.UTF_8)
            + "/versions/" + version);
        references(referenced, parser, seen);
        parser.parse(referenced.get("schema").asText());
      }
    }
  }

  private JsonNode get(String path) {
    HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
    RuntimeException failed = null;
    for (String url : registryUrls) {
      HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(url.strip().replaceAll("/+$", "") + path))
          .timeout(Duration.ofSeconds(30)).header("Accept", "application/vnd.schemaregistry.v1+json");
      if (authorization != null) {
        request.header("Authorization", authorization);
      }
      try {
        HttpResponse<String> response = client.send(request.build(), HttpResponse.BodyHandlers.ofString());
        if (response.statusCode() == 200) {
          return new ObjectMapper().readTree(response.body());
        }
        failed = new IllegalStateException(url + path + " answered " + response.statusCode() + ": "
            + response.body());
        if (response.statusCode() < 500) {
          break; // the registry's answer (e.g. 40403 not found), not a broker that is down
        }
      } catch (IOException e) {
        failed = new IllegalStateException(url + path + ": " + e, e);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        throw new IllegalStateException("interrupted", e);
      }
    }
    throw failed;
  }

  // ------------------------------------------------------------------------------------------------
  // Avro's generic values to what Spark's Row converters take, as strom.spark.avro_types maps types

  private interface Conv extends java.io.Serializable {
    Object apply(Object avro);
  }

  private static Conv conv(Schema schema) {
    LogicalType logical = schema.getLogicalType();
    switch (schema.getType()) {
      case RECORD: {
        List<Schema.Field> fields = schema.getFields();
        Conv[] convs = new Conv[fields.size()];
        for (int i = 0; i < convs.length; i++) {
          convs[i] = conv(fields.get(i).schema());
        }
        return o -> {
          GenericData.Record r = (GenericData.Record) o;
          Object[] values = new Object[convs.length];
          for (int i = 0; i < convs.length; i++) {
            Object v = r.get(i);
            values[i] = v == null ? null : convs[i].apply(v);
          }
          return RowFactory.create(values);
        };
      }
      case UNION: {
        Schema branch = null;
        for (Schema s : schema.getTypes()) {
          if (s.getType() != Schema.Type.NULL) {
            branch = s;
          }
        }
        return branch == null ? o -> null : conv(branch); // only ["null", T]: the driver refuses others
      }
      case STRING:
      case ENUM:
        return Object::toString;
      case BYTES:
        if (logical instanceof LogicalTypes.Decimal) {
          int scale = ((LogicalTypes.Decimal) logical).getScale();
          return o -> new BigDecimal(new BigInteger(bytes((ByteBuffer) o)), scale);
        }
        return o -> bytes((ByteBuffer) o);
      case FIXED:
        if (logical instanceof LogicalTypes.Decimal) {
          int scale = ((LogicalTypes.Decimal) logical).getScale();
          return o -> new BigDecimal(new BigInteger(((GenericFixed) o).bytes()), scale);
        }
        return o -> ((GenericFixed) o).bytes().clone();
      case ARRAY: {
        Conv items = conv(schema.getElementType());
        return o -> {
          List<?> list = (List<?>) o;
          Object[] out = new Object[list.size()];
          for (int i = 0; i < out.length; i++) {
            Object v = list.get(i);
            out[i] = v == null ? null : items.apply(v);
          }
          return out;
        };
      }
      case MAP: {
        Conv values = conv(schema.getValueType());
        return o -> {
          Map<?, ?> map = (Map<?, ?>) o;
          Map<String, Object> out = new HashMap<>(map.size() * 2);
          for (Map.Entry<?, ?> e : map.entrySet()) {
            Object v = e.getValue();
            out.put(e.getKey().toString(), v == null ? null : values.apply(v));
          }
          return out;
        };
      }
      case LONG:
        if (logical instanceof LogicalTypes.TimestampMillis) {
          return o -> Instant.ofEpochMilli((Long) o);
        }
        if (logical instanceof LogicalTypes.TimestampMicros) {
          return o -> {
            long us = (Long) o;
            return Instant.ofEpochSecond(Math.floorDiv(us, 1_000_000L), Math.floorMod(us, 1_000_000L) * 1000L);
          };
        }
        return o -> o;
      case INT:
        if (logical instanceof LogicalTypes.Date) {
          return o -> LocalDate.ofEpochDay((Integer) o);
        }
        return o -> o;
      default:
        return o -> o;
    }
  }

  private static byte[] bytes(ByteBuffer b) {
    byte[] out = new byte[b.remaining()];
    b.duplicate().get(out);
    return out;
  }
}
