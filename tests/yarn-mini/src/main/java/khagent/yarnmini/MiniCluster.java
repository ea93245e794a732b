// SPDX-License-Identifier: Apache-2.0
package khagent.yarnmini;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.nodemanager.NodeManager;
import org.apache.hadoop.yarn.util.resource.ResourceUtils;

/**
 * Starts a MiniYARNCluster (one ResourceManager, N NodeManagers, every web
 * and RPC address on 127.0.0.1, ephemeral ports) for khagent's tests, writes
 * where it listens to a file, and then takes one command a line on stdin,
 * answering one line on stdout ("ok {json}" or "error why"):
 *
 *   submit QUEUE COUNT MEMORY_MB VCORES GPUS   an application whose AM (SleepAm)
 *                                              runs COUNT `sleep` containers;
 *                                              answered once all are running
 *   status APP                                 what the AM saw (running, completed
 *                                              with exit status, preemption notices)
 *   kill APP                                   kill the application
 *   quit                                       stop (so does the end of stdin, or SIGTERM)
 *
 * Each NodeManager offers --vcores, --memory-mb and --gpus of yarn.io/gpu.
 * The CapacityScheduler has the leaf queues root.default, root.low and
 * root.high, and the DominantResourceCalculator (every resource type counts).
 */
public final class MiniCluster {
  static final String GPU = "yarn.io/gpu";

  private final Path work;
  private final int nodes;
  private final int vcores;
  private final int memoryMb;
  private final int gpus;
  private MiniYARNCluster cluster;
  private YarnClient client;
  private final AtomicBoolean stopped = new AtomicBoolean();

  private MiniCluster(Path work, int nodes, int vcores, int memoryMb, int gpus) {
    this.work = work;
    this.nodes = nodes;
    this.vcores = vcores;
    this.memoryMb = memoryMb;
    this.gpus = gpus;
  }

  public static void main(String[] args) throws Exception {
    Map<String, String> opt = new HashMap<>();
    for (int i = 0; i + 1 < args.length; i += 2) opt.put(args[i], args[i + 1]);
    if (!opt.containsKey("--work")) {
      System.err.println("usage: MiniCluster --work DIR [--ready FILE] [--nodes N] [--vcores V]"
          + " [--memory-mb M] [--gpus G]");
      System.exit(2);
    }
    Path work = Path.of(opt.get("--work")).toAbsolutePath();
    Path ready = Path.of(opt.getOrDefault("--ready", work.resolve("ready.json").toString()));
    MiniCluster mc = new MiniCluster(work, Integer.parseInt(opt.getOrDefault("--nodes", "1")),
        Integer.parseInt(opt.getOrDefault("--vcores", "8")),
        Integer.parseInt(opt.getOrDefault("--memory-mb", "8192")),
        Integer.parseInt(opt.getOrDefault("--gpus", "4")));
    // stdout carries the protocol only: keep everything else off it.
    PrintStream out = new PrintStream(new FileOutputStream(java.io.FileDescriptor.out), true,
        StandardCharsets.UTF_8);
    System.setOut(System.err);
    Runtime.getRuntime().addShutdownHook(new Thread(mc::stop, "stop-cluster"));
    mc.start();
    String info = mc.readyJson();
    Path tmp = ready.resolveSibling(ready.getFileName() + ".tmp");
    Files.writeString(tmp, info + "\n");
    Files.move(tmp, ready, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    out.println("ready " + info);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    for (String line; (line = in.readLine()) != null; ) {
      line = line.trim();
      if (line.isEmpty()) continue;
      if (line.equals("quit")) break;
      try {
        out.println("ok " + mc.command(line.split("\\s+")));
      } catch (Exception e) {
        e.printStackTrace();
        out.println("error " + String.valueOf(e).replace('\n', ' '));
      }
    }
    mc.stop();  // halts
  }

  private Configuration conf() {
    YarnConfiguration conf = new YarnConfiguration();
    // Loopback only, ephemeral ports.
    conf.set(YarnConfiguration.RM_BIND_HOST, "127.0.0.1");
    conf.set(YarnConfiguration.NM_BIND_HOST, "127.0.0.1");
    conf.set("yarn.timeline-service.enabled", "false");
    // Web authentication as on a cluster with simple (pseudo) auth: the
    // caller is `user.name`, and a request without one is refused (401).
    conf.set("hadoop.http.filter.initializers",
        "org.apache.hadoop.security.AuthenticationFilterInitializer");
    conf.set("hadoop.http.authentication.type", "simple");
    conf.setBoolean("hadoop.http.authentication.simple.anonymous.allowed", false);
    // ACLs on: only this process's user (who submits the test applications)
    // is an admin, so another caller has no view access to them.
    conf.setBoolean(YarnConfiguration.YARN_ACL_ENABLE, true);
    conf.set(YarnConfiguration.YARN_ADMIN_ACL, System.getProperty("user.name"));
    // One more resource type, and how much of it each NodeManager has.
    conf.set(YarnConfiguration.RESOURCE_TYPES, GPU);
    conf.set(YarnConfiguration.NM_RESOURCES_PREFIX + GPU, Integer.toString(gpus));
    conf.setInt(YarnConfiguration.NM_PMEM_MB, memoryMb);
    conf.setInt("yarn.minicluster." + YarnConfiguration.NM_PMEM_MB, memoryMb);
    conf.setInt(YarnConfiguration.NM_VCORES, vcores);
    conf.setBoolean(YarnConfiguration.NM_PMEM_CHECK_ENABLED, false);
    conf.setBoolean(YarnConfiguration.NM_VMEM_CHECK_ENABLED, false);
    // A busy CI disk must not mark the NodeManager unhealthy.
    conf.setFloat(YarnConfiguration.NM_MAX_PER_DISK_UTILIZATION_PERCENTAGE, 100.0f);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MINIMUM_ALLOCATION_MB, 128);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_MB, memoryMb);
    conf.setInt(YarnConfiguration.RM_SCHEDULER_MAXIMUM_ALLOCATION_VCORES, vcores);
    conf.setInt(YarnConfiguration.RM_AM_MAX_ATTEMPTS, 1);
    conf.setLong(YarnConfiguration.RM_NM_HEARTBEAT_INTERVAL_MS, 500);
    conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_MAX_WAIT_MS, 10_000);
    conf.setLong(YarnConfiguration.RESOURCEMANAGER_CONNECT_RETRY_INTERVAL_MS, 500);
    conf.setInt(YarnConfiguration.NM_DELETE_THREAD_COUNT, 1);
    // Leaf queues root.default, root.low, root.high; every type counts.
    String cs = "yarn.scheduler.capacity.";
    conf.set(cs + "resource-calculator",
        "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator");
    conf.set(cs + "root.queues", "default,low,high");
    conf.set(cs + "root.default.capacity", "34");
    conf.set(cs + "root.low.capacity", "33");
    conf.set(cs + "root.high.capacity", "33");
    for (String q : List.of("default", "low", "high")) {
      conf.set(cs + "root." + q + ".maximum-capacity", "100");
      conf.set(cs + "root." + q + ".user-limit-factor", "10");
    }
    conf.set(cs + "maximum-am-resource-percent", "0.5");
    // Queue ACLs default to "*" at the root, which would give every caller
    // view access through the queue: only this user administers and submits.
    conf.set(cs + "root.acl_administer_queue", System.getProperty("user.name"));
    conf.set(cs + "root.acl_submit_applications", System.getProperty("user.name"));
    return conf;
  }

  private void start() throws Exception {
    Files.createDirectories(work);
    System.setProperty("test.build.data", work.toString());
    Configuration conf = conf();
    ResourceUtils.resetResourceTypes(conf);
    ResourceUtils.resetNodeResources();
    cluster = new MiniYARNCluster("khagent", nodes, 1, 1);
    cluster.init(conf);
    cluster.start();
    if (!cluster.waitForNodeManagersToConnect(60_000)) {
      throw new IllegalStateException("NodeManagers did not register within 60 s");
    }
    client = YarnClient.createYarnClient();
    client.init(cluster.getConfig());
    client.start();
    // Wait until every NodeManager is RUNNING with its resources.
    long until = System.currentTimeMillis() + 60_000;
    while (client.getNodeReports(NodeState.RUNNING).size() < nodes) {
      if (System.currentTimeMillis() > until) throw new IllegalStateException("nodes not RUNNING");
      Thread.sleep(100);
    }
    // The AM reads the cluster's configuration from its classpath.
    Path confDir = work.resolve("conf");
    Files.createDirectories(confDir);
    try (OutputStream os = Files.newOutputStream(confDir.resolve("yarn-site.xml"))) {
      cluster.getConfig().writeXml(os);
    }
  }

  private String readyJson() throws Exception {
    StringBuilder sb = new StringBuilder();
    sb.append("{\"rm\":\"http://").append(cluster.getConfig().get(YarnConfiguration.RM_WEBAPP_ADDRESS))
        .append("\",\"nodes\":[");
    for (int i = 0; i < nodes; i++) {
      NodeManager nm = cluster.getNodeManager(i);
      String id = nm.getNMContext().getNodeId().toString();
      String host = nm.getNMContext().getNodeId().getHost();
      if (i > 0) sb.append(',');
      sb.append("{\"id\":\"").append(id).append("\",\"http\":\"").append(host).append(':')
          .append(nm.getNMContext().getHttpPort()).append("\"}");
    }
    sb.append("],\"pid\":").append(ProcessHandle.current().pid()).append('}');
    return sb.toString();
  }

  private String command(String[] a) throws Exception {
    switch (a[0]) {
      case "submit":
        return submit(a[1], Integer.parseInt(a[2]), Integer.parseInt(a[3]), Integer.parseInt(a[4]),
            Integer.parseInt(a[5]));
      case "status":
        return status(ApplicationId.fromString(a[1]));
      case "kill": {
        ApplicationId id = ApplicationId.fromString(a[1]);
        client.killApplication(id);
        waitState(id, EnumSet.of(YarnApplicationState.KILLED, YarnApplicationState.FINISHED,
            YarnApplicationState.FAILED), 30_000);
        return "{\"app\":\"" + id + "\"}";
      }
      default:
        throw new IllegalArgumentException("unknown command " + a[0]);
    }
  }

  private Path statusFile(ApplicationId id) {
    return work.resolve("apps").resolve(id + ".json");
  }

  private String status(ApplicationId id) throws IOException {
    Path f = statusFile(id);
    return Files.exists(f) ? Files.readString(f).trim() : "{}";
  }

  private String submit(String queue, int count, int memMb, int vc, int gpu) throws Exception {
    Files.createDirectories(work.resolve("apps"));
    YarnClientApplication app = client.createApplication();
    ApplicationSubmissionContext ctx = app.getApplicationSubmissionContext();
    ApplicationId id = ctx.getApplicationId();
    ctx.setApplicationName("khagent-sleep");
    ctx.setQueue(queue);
    ctx.setMaxAppAttempts(1);
    ctx.setResource(Resource.newInstance(256, 1));
    String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
    String cp = work.resolve("conf") + File.pathSeparator + System.getProperty("java.class.path");
    Map<String, String> env = new HashMap<>();
    env.put("CLASSPATH", cp);
    env.put("KHAGENT_STATUS_FILE", statusFile(id).toString());
    List<String> cmd = new ArrayList<>();
    cmd.add(java + " -Xmx128m -XX:TieredStopAtLevel=1 -cp \"$CLASSPATH\" " + SleepAm.class.getName()
        + " " + count + " " + memMb + " " + vc + " " + gpu + " 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr");
    ctx.setAMContainerSpec(ContainerLaunchContext.newInstance(
        Collections.emptyMap(), env, cmd, null, null, null));
    client.submitApplication(ctx);
    // Answered once the AM reports every container running.
    long until = System.currentTimeMillis() + 90_000;
    while (System.currentTimeMillis() < until) {
      String st = status(id);
      if (st.contains("\"ready\":true")) return "{\"app\":\"" + id + "\",\"status\":" + st + "}";
      ApplicationReport r = client.getApplicationReport(id);
      if (r.getYarnApplicationState() == YarnApplicationState.FAILED
          || r.getYarnApplicationState() == YarnApplicationState.KILLED) {
        throw new IllegalStateException(id + " " + r.getYarnApplicationState() + ": "
            + r.getDiagnostics());
      }
      Thread.sleep(200);
    }
    throw new IllegalStateException(id + ": containers not running within 90 s: " + status(id));
  }

  private void waitState(ApplicationId id, EnumSet<YarnApplicationState> states, long ms)
      throws Exception {
    long until = System.currentTimeMillis() + ms;
    while (!states.contains(client.getApplicationReport(id).getYarnApplicationState())) {
      if (System.currentTimeMillis() > until) throw new IllegalStateException(id + " did not stop");
      Thread.sleep(100);
    }
  }

  /**
   * Kills every application, waits (at most 20 s) until the NodeManagers
   * hold no container, and halts: a graceful MiniYARNCluster.stop() takes
   * about 17 s a NodeManager in RPC server shutdowns, and once no container
   * runs there is nothing left for it to clean up.
   */
  private void stop() {
    if (!stopped.compareAndSet(false, true)) return;
    try {
      if (client != null) {
        for (ApplicationReport r : client.getApplications(EnumSet.of(YarnApplicationState.NEW,
            YarnApplicationState.NEW_SAVING, YarnApplicationState.SUBMITTED,
            YarnApplicationState.ACCEPTED, YarnApplicationState.RUNNING))) {
          try {
            client.killApplication(r.getApplicationId());
          } catch (Exception e) {
            System.err.println("kill " + r.getApplicationId() + ": " + e);
          }
        }
      }
      long until = System.currentTimeMillis() + 20_000;
      while (cluster != null && System.currentTimeMillis() < until && containersLeft() > 0) {
        Thread.sleep(100);
      }
      if (cluster != null && containersLeft() > 0) {
        System.err.println(containersLeft() + " containers still held after 20 s; stopping anyway");
        cluster.stop();
      }
    } catch (Exception e) {
      System.err.println("stopping: " + e);
    }
    System.err.flush();
    Runtime.getRuntime().halt(0);
  }

  private int containersLeft() {
    int n = 0;
    for (int i = 0; i < nodes; i++) n += cluster.getNodeManager(i).getNMContext().getContainers().size();
    return n;
  }
}
