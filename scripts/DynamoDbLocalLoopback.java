// Starts DynamoDB Local bound to one host only (default 127.0.0.1).
//
// DynamoDB Local has no bind-address flag: ServerRunner builds a Jetty
// Server(port), whose ServerConnector listens on every interface. This
// launcher builds the server the same way (same command-line flags), sets the
// host of every Jetty connector before starting it, checks it started, and
// blocks until the server stops.
//
// Built and run by scripts/standins.sh:
//   javac -cp DynamoDBLocal.jar:DynamoDBLocal_lib/* -d OUT DynamoDbLocalLoopback.java
//   java -Djava.library.path=DynamoDBLocal_lib -cp DynamoDBLocal.jar:DynamoDBLocal_lib/*:OUT \
//        [-Dsqsclaim.bindHost=127.0.0.1] DynamoDbLocalLoopback -inMemory -sharedDb -disableTelemetry -port 8000
//
// Written against DynamoDB Local 1.25.x (Jetty 9.4): DynamoDBProxyServer keeps
// its Jetty server in the private field `server`; reflection is used for it.

import com.amazonaws.services.dynamodbv2.local.main.ServerRunner;
import com.amazonaws.services.dynamodbv2.local.server.DynamoDBProxyServer;
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.NetworkConnector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;

public final class DynamoDbLocalLoopback {
    private DynamoDbLocalLoopback() {}

    public static void main(String[] args) throws Exception {
        String host = System.getProperty("sqsclaim.bindHost", "127.0.0.1");

        DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
        if (proxy == null) {
            // -help / -version: ServerRunner printed what was asked.
            return;
        }

        Server jetty = jettyServerOf(proxy);
        Connector[] connectors = jetty.getConnectors();
        if (connectors == null || connectors.length == 0) {
            fail("the Jetty server of DynamoDB Local has no connector to bind");
        }
        for (Connector c : connectors) {
            if (!(c instanceof ServerConnector)) {
                fail("unexpected Jetty connector type " + c.getClass().getName()
                        + ": cannot restrict it to " + host);
            }
            ((ServerConnector) c).setHost(host);
        }

        // DynamoDBProxyServer.start() swallows a bind failure (prints
        // "Could not start server on port ..." and stops Jetty): check it.
        proxy.start();
        if (!jetty.isStarted()) {
            fail("DynamoDB Local did not start (see the message above)");
        }
        for (Connector c : jetty.getConnectors()) {
            NetworkConnector nc = (NetworkConnector) c;
            System.out.println("DynamoDbLocalLoopback: listening on " + nc.getHost() + ":" + nc.getLocalPort());
        }
        System.out.flush();
        jetty.join();
    }

    private static Server jettyServerOf(DynamoDBProxyServer proxy) throws IllegalAccessException {
        // Prefer the field named `server`; fall back to any field of type Server.
        Field found = null;
        for (Field f : DynamoDBProxyServer.class.getDeclaredFields()) {
            if (Server.class.isAssignableFrom(f.getType())) {
                if (found == null || f.getName().equals("server")) {
                    found = f;
                }
            }
        }
        if (found == null) {
            fail("no org.eclipse.jetty.server.Server field in DynamoDBProxyServer:"
                    + " this DynamoDB Local version is not supported by the launcher");
        }
        found.setAccessible(true);
        Server s = (Server) found.get(proxy);
        if (s == null) {
            fail("DynamoDBProxyServer." + found.getName() + " is null");
        }
        return s;
    }

    private static void fail(String msg) {
        System.err.println("DynamoDbLocalLoopback: " + msg);
        System.exit(2);
    }
}
