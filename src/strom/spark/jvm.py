"""strom's Spark functions compiled for the JVM (the Java sources in jvm/, built by `make jvm` into
build/jvm/strom-spark.jar): where the jar is, and from_avro's Java UDF (strom.spark.AvroDecode).

A session gets the jar through spark.jars (strom.spark.local_session and the trucking demo add it;
spark-submit users pass --jars). Where the class is not on the session's classpath (a cluster
without the jar, Spark Connect), from_avro takes its Arrow UDF path instead.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import DataType

JAR_ENV = "STROM_SPARK_JAR"  # another place for the jar (e.g. an installed, not editable, strom)
AVRO_DECODE = "strom.spark.AvroDecode"


def jar_path() -> Path | None:
    """The built jar: $STROM_SPARK_JAR, else build/jvm/strom-spark.jar of the source tree strom is
    imported from (an editable install); None when there is none."""
    env = os.environ.get(JAR_ENV)
    path = Path(env) if env else Path(__file__).resolve().parents[3] / "build" / "jvm" / "strom-spark.jar"
    return path if path.is_file() else None


def with_jar(jars: str | None) -> str | None:
    """A spark.jars value with strom's jar added (when built)."""
    jar = jar_path()
    if jar is None:
        return jars
    listed = [j for j in (jars or "").split(",") if j]
    return ",".join(listed if str(jar) in listed else [*listed, str(jar)])


def has_class(spark: SparkSession, name: str) -> bool:
    """Whether the session's JVM (a classic session, not Spark Connect) can load ``name``."""
    try:
        jvm = spark.sparkContext._jvm
    except Exception:  # Spark Connect: no JVM on this side
        return False
    if jvm is None:
        return False
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(name, False, loader)
    except Exception:  # py4j's Py4JJavaError: ClassNotFoundException
        return False
    return True


def authorization(config: Mapping[str, str]) -> str | None:
    """The HTTP Authorization header of SchemaRegistryClient's basic.auth.user.info, if set."""
    user_info = config.get("basic.auth.user.info")
    return "Basic " + base64.b64encode(user_info.encode()).decode() if user_info else None


def register_avro_decode(spark: SparkSession, return_type: DataType, reader_id: int, reader_text: str,
                         writers: Mapping[int, str], registry_urls: str, auth: str | None, permissive: bool) -> str:
    """Register a strom.spark.AvroDecode for these schemas in the session; its function name (the same
    name for the same arguments, so defining one column twice registers one function)."""
    key = "\x00".join([return_type.json(), str(reader_id), reader_text, registry_urls, auth or "", str(permissive),
                       *(f"{i}={t}" for i, t in sorted(writers.items()))])
    name = "strom_from_avro_" + hashlib.sha256(key.encode()).hexdigest()[:16]
    jvm: Any = spark.sparkContext._jvm
    texts = jvm.java.util.HashMap()
    for schema_id, text in writers.items():
        texts.put(schema_id, text)  # py4j: a Python int is a java.lang.Integer
    udf = jvm.strom.spark.AvroDecode(reader_id, reader_text, texts, registry_urls, auth or "", permissive)
    java_type = spark._jsparkSession.parseDataType(return_type.json())
    spark._jsparkSession.udf().register(name, udf, java_type)
    return name
